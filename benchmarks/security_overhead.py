"""Cost of the untrusted-input checks on the read path: one checkout, checks on against checks off.

Nothing in shardkit has a switch for them. This script replaces exactly these functions, in
this process and in its DataLoader workers (Switchable: the state travels with each batch), with what reading did
before the threat model (docs/reliability.md):

  codecs.pillow.open_image, _open_allowed -> Image.open(stream): formats=None (every Pillow plugin, EPS
                                          included), no pixel-limit check of the header, no
                                          DecompressionBombWarning filter (decode_fully calls the
                                          second, inside its own warning filter)
  codecs.decode.image_formats          -> the whole allow-list: the manifest's recorded formats unread
  codecs.decode.max_image_pixels       -> the default: the manifest's pixel limit unread
  formats.hdf5_reader.check_self_contained    -> nothing: no link, storage, filter or chunk-size checks
  formats.hdf5_reader.disable_filter_plugins  -> nothing: HDF5's plugin path left as it is
  formats.pt_reader.check_zip_index    -> nothing: torch.load without reading the zip index first
  integrity.open_regular               -> os.open(path) and the size check: no real path inside DST,
                                          no O_NOFOLLOW|O_NONBLOCK, no regular-file or same-file check

Every loaded shardkit module's reference to each function is swapped (`from x import f` copies
included); the script stops if one is missing. Per format, on read_throughput.py's dataset
(--images JPEGs of about 500x375 in one default-size shard) and a re-shard of it into shards of
--tiny samples, each measure is a block of work run checks on and off in ABBA order (BAAB on
odd repeats), --repeats times:

  open_dataset x N            open_dataset(DST), --opens times
  shard open + first read     close and reopen the default shard, read sample 0 (decode=None), --opens times
  shard open + read all       reopen and read every sample (decode=None, batches of 256): the default
                              shard, and --tiny-shards tiny shards: the checks' share of reading a shard
  loader raw / loader pil     read_throughput's DataLoader(batch_size=256, num_workers=2,
                              persistent_workers=True), warm: --raw-batches batches with decode=None
                              (payloads returned), --pil-batches with decode="pil" (the collate returns
                              only sizes, so the decode's share is the largest it can be)

For each: CPU per block (process_time; plus the workers' /proc schedstat for loaders), the
median of the per-repeat on/off ratios of wall and CPU time with their interquartile range and a
distribution-free 95% confidence interval of the median, and a verdict against 5% from the
narrower interval. A loaded machine can leave that interval wider than 5%, so each check is also
timed alone, against its stand-in, in tight loops (CPU microseconds added per open_dataset, per
shard open and per decoded sample), and its share of each block is printed next to it.

    PYTHONPATH=. python benchmarks/security_overhead.py         # every format; ~3 minutes when idle
    PYTHONPATH=. python benchmarks/security_overhead.py --formats hdf5 --repeats 31

Results and the machine they came from: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch.utils.data

import shardkit
import shardkit.codecs.decode
import shardkit.codecs.pillow
import shardkit.read.dataset
import shardkit.formats.checked
import shardkit.formats.hdf5_reader
import shardkit.formats.lmdb
import shardkit.formats.pt_reader
import shardkit.integrity
import shardkit.ops.verification
from shardkit.formats import format_names
from shardkit.integrity import WrongSize
from read_throughput import WorkerPids, log, payload_list, prepare  # type: ignore[import-not-found]

TARGET = 1.05


# ---- the switch --------------------------------------------------------------------------
def _open_any_format(stream: Any, formats: Sequence[str] = (), max_pixels: int = 0) -> Any:
    from PIL import Image
    return Image.open(stream)


def _every_allowed_format(schema: Any, source: Any = None) -> Tuple[str, ...]:
    return shardkit.codecs.pillow.IMAGE_FORMATS


def _default_pixel_limit(schema: Any) -> int:
    return shardkit.codecs.pillow.DEFAULT_MAX_IMAGE_PIXELS


def _skipped(name: str) -> Callable[..., None]:
    """A do-nothing stand-in for one check (one object per check, so swapping back is exact)."""
    def skipped(*args: Any) -> None:
        return None
    skipped.__name__ = f"skipped_{name}"
    return skipped


def _open_sized(path: Any, root: Any, size: int) -> int:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    actual = os.fstat(fd).st_size
    if actual != size:
        os.close(fd)
        raise WrongSize(path, actual, size)
    return fd


#: (module, function name, what runs instead while the checks are off)
SWITCHED: List[Tuple[Any, str, Callable[..., Any]]] = [
    (shardkit.codecs.pillow, "open_image", _open_any_format),
    (shardkit.codecs.pillow, "_open_allowed", _open_any_format),
    (shardkit.codecs.decode, "image_formats", _every_allowed_format),
    (shardkit.codecs.decode, "max_image_pixels", _default_pixel_limit),
    (shardkit.formats.hdf5_reader, "check_self_contained", _skipped("check_self_contained")),
    (shardkit.formats.hdf5_reader, "disable_filter_plugins", _skipped("disable_filter_plugins")),
    (shardkit.formats.pt_reader, "check_zip_index", _skipped("check_zip_index")),
    (shardkit.integrity, "open_regular", _open_sized),
]
_ORIGINALS = [getattr(module, name) for module, name, _ in SWITCHED]


def _sites() -> List[Tuple[Any, str, int]]:
    """(module, attribute, index in SWITCHED) of every reference to a switched function in the
    loaded shardkit modules, found once (the script imports every module that reads shards)."""
    found = []
    for module in [m for key, m in sorted(sys.modules.items()) if key.split(".")[0] == "shardkit"]:
        for attribute, value in vars(module).items():
            for number, original in enumerate(_ORIGINALS):
                if value is original or value is SWITCHED[number][2]:
                    found.append((module, attribute, number))
    return found


_SITES = _sites()


def switch_checks(on: bool) -> int:
    """Put the real checks (on) or their stand-ins (off) at every site; the number of sites."""
    for module, attribute, number in _SITES:
        setattr(module, attribute, _ORIGINALS[number] if on else SWITCHED[number][2])
    return len(_SITES)


class Switchable(torch.utils.data.Dataset):
    """A dataset whose batches come as (checks on?, index) pairs: each worker switches the checks
    when the state changes, so one loader and the same worker processes serve both states."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.on: Optional[bool] = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, keys: List[Tuple[bool, int]]) -> List[Any]:
        if keys[0][0] is not self.on:
            self.on = keys[0][0]
            switch_checks(self.on)
        return self.dataset.__getitems__([index for _, index in keys])


class StateOrder(torch.utils.data.Sampler):
    """The same order every pass, each index paired with the state the main process set."""

    def __init__(self, order: np.ndarray) -> None:
        self.order = order.tolist()
        self.on = True

    def __iter__(self) -> Any:
        return iter([(self.on, index) for index in self.order])

    def __len__(self) -> int:
        return len(self.order)


# ---- statistics ---------------------------------------------------------------------------
def median_interval(values: Sequence[float]) -> Tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median: the order statistics m and n-1-m
    (0-based) for the largest m with P(Binomial(n, 1/2) <= m) <= 2.5%."""
    ordered, n = sorted(values), len(values)
    m = -1
    while m + 1 < n // 2 and sum(math.comb(n, i) for i in range(m + 2)) / 2 ** n <= 0.025:
        m += 1
    return ordered[max(m, 0)], ordered[n - 1 - max(m, 0)]


def quartiles(values: Sequence[float]) -> Tuple[float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def verdict(rows: Dict[str, List[float]]) -> str:
    """Against the 5% target, from the narrower of the wall and CPU confidence intervals."""
    intervals = {column: median_interval(rows[column]) for column in ("ratio", "cpu_ratio")}
    column = min(intervals, key=lambda name: intervals[name][1] - intervals[name][0])
    low, high = intervals[column]
    where = "wall" if column == "ratio" else "CPU"
    if high <= TARGET:
        return f"within 5% ({where})"
    if low > TARGET:
        return f"OVER 5% ({where})"
    return "not resolved"


# ---- end to end: the same work with the checks on and off -------------------------------
Work = Callable[[], Optional[float]]      # one block; returns its CPU seconds, or None for process_time


def abba(on: Work, off: Work, repeats: int) -> Dict[str, List[float]]:
    """Per-repeat wall and CPU times and ratios on/off, each repeat ABBA (BAAB on odd repeats)."""
    for state, work in ((True, on), (False, off)):      # untimed: fill caches, start workers
        switch_checks(state)
        work()
    rows: Dict[str, List[float]] = {"on_s": [], "off_s": [], "on_cpu": [], "off_cpu": [], "ratio": [], "cpu_ratio": []}
    for repeat in range(repeats):
        wall = {True: 0.0, False: 0.0}
        cpu = {True: 0.0, False: 0.0}
        for state in ([True, False, False, True] if repeat % 2 == 0 else [False, True, True, False]):
            switch_checks(state)
            cpu_start, start = time.process_time(), time.perf_counter()
            used = (on if state else off)()
            wall[state] += time.perf_counter() - start
            cpu[state] += used if used is not None else time.process_time() - cpu_start
        for state, name in ((True, "on"), (False, "off")):
            rows[f"{name}_s"].append(wall[state] / 2)
            rows[f"{name}_cpu"].append(cpu[state] / 2)
        rows["ratio"].append(wall[True] / wall[False])
        rows["cpu_ratio"].append(cpu[True] / cpu[False])
    switch_checks(True)
    return rows


def both(work: Callable[[], None]) -> Tuple[Work, Work]:
    """The same in-process work for both states (abba switches the checks around it)."""
    return work, work


def open_work(dst: str, opens: int) -> Tuple[Work, Work]:
    def work() -> None:
        for _ in range(opens):
            shardkit.open_dataset(dst)
    return both(work)


def reopen_work(dst: str, shards: int, times: int, whole: bool) -> Tuple[Work, Work]:
    """Read the first sample (or every sample, in batches of 256) of the dataset's first `shards`
    shards, then close them, so each time opens them afresh; `times` times per block."""
    ds = shardkit.open_dataset(dst, decode=None, max_open_shards=max(shards, 1))
    starts = ds.shard_starts[:shards + 1].tolist()
    if whole:
        order = np.random.default_rng(0).permutation(starts[-1])
        batches = [order[i:i + 256].tolist() for i in range(0, len(order), 256)]
    else:
        batches = [[first] for first in starts[:-1]]

    def work() -> None:
        for _ in range(times):
            for batch in batches:
                ds.__getitems__(batch)
            ds.close()
    return both(work)


def image_sizes(batch: List[Any]) -> List[Tuple[int, int]]:
    """collate_fn for decode="pil": only the sizes go back, so the decode is all that is timed."""
    return [sample[0].size for sample in batch]


def task_cpu(pid: int) -> float:
    """CPU seconds of every thread of a process, in nanoseconds from /proc (0 once it is gone)."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                total += int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return total / 1e9


def loader_work(dst: str, decode: Optional[str], indices: np.ndarray, args: argparse.Namespace) -> Tuple[Work, Work]:
    """One persistent DataLoader; a block is one pass with the workers' checks on or off.
    CPU: this process (process_time) and its workers (/proc schedstat, nanoseconds)."""
    pids = WorkerPids(shardkit.worker_init_fn, args.num_workers)
    sampler = StateOrder(indices)
    loader = torch.utils.data.DataLoader(
        Switchable(shardkit.open_dataset(dst, decode=decode)), batch_size=args.batch_size, sampler=sampler,
        num_workers=args.num_workers, persistent_workers=True, worker_init_fn=pids,
        collate_fn=payload_list if decode is None else image_sizes)

    def cpu() -> float:
        return time.process_time() + sum(task_cpu(pid) for pid in pids.pids[:] if pid)

    def block(on: bool) -> Work:
        def run() -> float:
            sampler.on = on
            start = cpu()
            for _ in loader:
                pass
            return cpu() - start
        return run
    return block(True), block(False)


def tiny_copy(fmt: str, dst: str, samples: int) -> str:
    """The dataset re-sharded into shards of `samples` (same format), kept next to it."""
    tiny = f"{dst}-tiny{samples}"
    if not os.path.exists(os.path.join(tiny, "manifest.json")):
        log(f"re-sharding {dst} into shards of {samples} samples")
        shardkit.convert(dst, tiny, format=fmt, samples_per_shard=samples, overwrite=True, quiet=True)
    return tiny


#: What each end-to-end block holds, for the check costs measured alone: (open_dataset calls,
#: shard opens, decoded samples) per block, filled in by measures().
Units = Tuple[int, int, int]


def measures(fmt: str, dst: str, args: argparse.Namespace) -> List[Tuple[str, Units, Callable[[], Tuple[Work, Work]]]]:
    """(name, units per block, factory of the on and off work) for each measure of one format."""
    tiny = tiny_copy(fmt, dst, args.tiny)
    count = len(shardkit.open_dataset(dst, decode=None))
    raw = np.random.default_rng(0).permutation(count)[:args.raw_batches * args.batch_size]
    pil = np.random.default_rng(1).permutation(count)[:args.pil_batches * args.batch_size]
    few, opens = f"{args.tiny_shards} shards of {args.tiny}", args.opens
    return [
        (f"open_dataset x{opens}", (opens, 0, 0), lambda: open_work(dst, opens)),
        (f"shard open + first read x{opens}", (0, opens, 0), lambda: reopen_work(dst, 1, opens, whole=False)),
        (f"shard open + read all, 1 shard of {count}", (0, 1, 0), lambda: reopen_work(dst, 1, 1, whole=True)),
        (f"shard open + read all, {few}", (0, args.tiny_shards, 0),
         lambda: reopen_work(tiny, args.tiny_shards, 1, whole=True)),
        (f"loader raw, {len(raw)} samples", (0, 0, 0), lambda: loader_work(dst, None, raw, args)),
        (f"loader pil, {len(pil)} samples", (0, 0, len(pil)), lambda: loader_work(dst, "pil", pil, args)),
    ]


# ---- each check alone: what it adds per call ----------------------------------------------
def added_cost(check: Callable[[], Any], stand_in: Callable[[], Any], calls: int, repeats: int) -> float:
    """Median CPU seconds a call of check takes beyond its stand-in (ABBA blocks of `calls`)."""
    def block(work: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                work()
        return run
    rows = abba(block(check), block(stand_in), repeats)
    return statistics.median(on - off for on, off in zip(rows["on_cpu"], rows["off_cpu"])) / calls


def check_costs(dst: str, args: argparse.Namespace) -> Dict[str, float]:
    """CPU seconds the checks add per open_dataset, per shard open and per decoded sample."""
    from PIL import Image
    from shardkit.codecs.decode import image_formats, max_image_pixels
    from shardkit.codecs.pillow import open_image
    from shardkit.integrity import open_regular
    ds = shardkit.open_dataset(dst, decode=None)
    manifest, entry = ds.manifest, ds.manifest.shards[0]
    path = os.path.join(dst, entry.path)
    payloads = [ds[index][0] for index in range(0, len(ds), max(1, len(ds) // 64))]
    ds.close()      # nothing may stay open: the end-to-end blocks must really open their shards
    formats, limit = image_formats(manifest.schema, manifest.source), max_image_pixels(manifest.schema)
    reps = max(5, args.repeats // 2)

    def per_payload(function: Callable[[bytes], Any]) -> Callable[[], None]:
        def run() -> None:
            for payload in payloads:
                function(payload)
        return run

    def close_fd(opener: Callable[[Any, Any, int], int]) -> Callable[[], None]:
        return lambda: os.close(opener(path, dst, entry.size))

    costs = {
        "open_dataset": added_cost(lambda: (image_formats(manifest.schema, manifest.source),
                                            max_image_pixels(manifest.schema)), lambda: None, 2000, reps),
        "shard open": added_cost(close_fd(open_regular), close_fd(_open_sized), 500, reps),
        "decoded sample": added_cost(per_payload(lambda p: open_image(io.BytesIO(p), formats, limit)),
                                     per_payload(lambda p: Image.open(io.BytesIO(p))), 20, reps) / len(payloads),
    }
    fmt = manifest.format_name
    if fmt == "hdf5":
        import h5py
        from shardkit.formats.hdf5_safety import check_self_contained, disable_filter_plugins
        with h5py.File(path, "r", locking=False) as handle:
            def checks() -> None:
                disable_filter_plugins()
                check_self_contained(handle, manifest.schema)
            costs["shard open"] += added_cost(checks, lambda: None, 50, reps)
    elif fmt == "pt":
        from shardkit.formats.pt_reader import check_zip_index
        costs["shard open"] += added_cost(lambda: check_zip_index(path), lambda: None, 50, reps)
    return costs


def shares(rows: Dict[str, List[float]], units: Units, costs: Dict[str, float]) -> float:
    """What the checks, measured alone, add to one block, as a share of its CPU with them off."""
    added = (units[0] * costs["open_dataset"] + units[1] * costs["shard open"]
             + units[2] * costs["decoded sample"])
    return added / statistics.median(rows["off_cpu"])


# ---- report ---------------------------------------------------------------------------------
def table(results: Dict[str, Tuple[Dict[str, List[float]], float]]) -> str:
    """Markdown: per format and measure, CPU per block, ratio medians, IQRs, 95% CIs, verdict, and
    the checks' share of the block from their cost measured alone."""
    lines = ["| format | measure | CPU ms on / off | wall ratio on/off (IQR; 95% CI) | CPU ratio (IQR; 95% CI) "
             "| end-to-end verdict | checks alone: share of the block |", "|---|---|---|---|---|---|---:|"]
    for key, (rows, share) in results.items():
        cells = [f"{statistics.median(rows['on_cpu']) * 1e3:.1f} / {statistics.median(rows['off_cpu']) * 1e3:.1f}"]
        for column in ("ratio", "cpu_ratio"):
            (q1, q3), (low, high) = quartiles(rows[column]), median_interval(rows[column])
            cells.append(f"{statistics.median(rows[column]):.3f} ({q1:.3f}-{q3:.3f}; {low:.3f}-{high:.3f})")
        lines.append(f"| {key} | {' | '.join(cells)} | {verdict(rows)} | {share * 100:.2f}% |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000, help="JPEGs in read_throughput's tree")
    parser.add_argument("--formats", default=",".join(format_names()))
    parser.add_argument("--repeats", type=int, default=15, help="ABBA repeats per measure (median)")
    parser.add_argument("--opens", type=int, default=10, help="open_dataset calls / shard reopens per block")
    parser.add_argument("--tiny", type=int, default=10, help="samples per tiny shard")
    parser.add_argument("--tiny-shards", type=int, default=20, help="tiny shards opened and read per block")
    parser.add_argument("--raw-batches", type=int, default=4, help="batches read per loader-raw block")
    parser.add_argument("--pil-batches", type=int, default=2, help="batches decoded per loader-pil block")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--shard-size", default="256MB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "shardkit-bench"))
    parser.add_argument("--only", default="", help="run only measures whose name contains this text")
    parser.add_argument("--json", dest="json_out", default=None, help="also write every repeat's numbers here")
    args = parser.parse_args(argv)
    if min(args.opens, args.tiny, args.tiny_shards, args.raw_batches, args.pil_batches, args.num_workers) < 1 \
            or args.repeats < 3:
        parser.error("counts must be at least 1, and --repeats at least 3")
    formats = [name.strip() for name in args.formats.split(",") if name.strip()]
    unknown = sorted(set(formats) - set(format_names()))
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}; registered: {', '.join(format_names())}")
    if {number for _, _, number in _SITES} != set(range(len(SWITCHED))):
        raise SystemExit("a switched check was not found; update SWITCHED")
    _, datasets, _, _ = prepare(args.cache, args.images, args.seed, formats, args.shard_size)
    load_before, started = os.getloadavg(), time.perf_counter()
    results: Dict[str, Tuple[Dict[str, List[float]], float]] = {}
    alone: Dict[str, Dict[str, float]] = {}
    for fmt in formats:
        alone[fmt] = check_costs(datasets[fmt], args)
        log(f"{fmt} checks alone, us added: " + ", ".join(f"{k} {v * 1e6:.1f}" for k, v in alone[fmt].items()))
        for name, units, make in [one for one in measures(fmt, datasets[fmt], args) if args.only in one[0]]:
            rows = abba(*make(), args.repeats)
            results[f"{fmt} | {name}"] = (rows, shares(rows, units, alone[fmt]))
            log(f"{fmt} {name}: median ratio {statistics.median(rows['ratio']):.3f} "
                f"CPU {statistics.median(rows['cpu_ratio']):.3f}")
    load_after = os.getloadavg()
    print(f"{os.cpu_count()} CPUs; {args.repeats} ABBA repeats per measure; {time.perf_counter() - started:.0f} s; "
          f"1-minute load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print("\nchecks alone, CPU microseconds added per open_dataset / shard open / decoded sample:")
    for fmt, costs in alone.items():
        print(f"  {fmt}: " + " / ".join(f"{value * 1e6:.1f}" for value in costs.values()))
    print()
    print(table(results))
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump({"args": vars(args), "load": [load_before, load_after], "alone": alone,
                       "results": {key: rows for key, (rows, _) in results.items()}}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
