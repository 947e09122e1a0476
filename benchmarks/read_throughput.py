"""Raw-byte read throughput: shardkit (every registered format) against two baselines, same run.

Contenders, each read through the same DataLoader(batch_size=256, num_workers=2,
persistent_workers=True) in the same random order (one permutation, fixed seed):

  shardkit-<fmt>  open_dataset(DST, decode=None): the stored JPEG bytes, nothing decoded, read
                  a batch at a time (the DataLoader calls ds.__getitems__ with each batch)
  shardkit-<fmt> per-sample   the same with batching off (ds[i] once per sample)
  shardkit-<fmt> one-buffer   batched, with collate_fn=shardkit.collate_raw: the batch leaves
                  the worker as one shared-memory buffer (a RawBatch), not a list of bytes
  (a) paths       ImageFolder-style: open and read each source file by its path
  (b) mmap floor  a trivial Dataset returning slices of one memory-mapped file holding
                  the same bytes back to back: what the DataLoader itself can carry
  (b) mmap floor one-buffer   the floor's Dataset with collate_fn=shardkit.collate_raw (for
                  transparency: what the one-buffer transport gives without shardkit's reads)

Unless "one-buffer", the collate function returns the list of payloads (they differ in
length); the ratios "x (b)" are always to the list-collated floor. Before timing, each
contender is checked to serve the same bytes and labels as the source files, through its own
collate function. Warm: all data in the
page cache (one untimed epoch first), contenders interleaved within each repeat (the order
rotates), a repeat being --epochs epochs; median of the repeats, and the ratio to (b) is the
median of the per-repeat ratios (in brackets: their 25th-75th percentiles), so machine noise
hits every contender alike. Cold:
`echo 3 > /proc/sys/vm/drop_caches` before each contender's first epoch on a fresh DataLoader
(needs root; skipped with a note otherwise).

    PYTHONPATH=. python benchmarks/read_throughput.py --images 3000 --repeats 15 --cold-repeats 2

Results and the machine they came from: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import mmap
import multiprocessing
import os
import shutil
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch.utils.data

import shardkit
from shardkit.formats import format_names
from shardkit.samples import make_photo_tree

FLOOR = "(b) mmap floor"
PATHS = "(a) paths"
ONE_BUFFER = " one-buffer"


# ---- the contenders ------------------------------------------------------------------
class PathFiles(torch.utils.data.Dataset):
    """ImageFolder-style: each sample is one file, opened and read by its path."""

    def __init__(self, paths: Sequence[str], labels: np.ndarray) -> None:
        self.paths = list(paths)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Tuple[bytes, int]:
        with open(self.paths[index], "rb") as handle:
            return handle.read(), int(self.labels[index])


class MmapFloor(torch.utils.data.Dataset):
    """The floor: slices of one memory-mapped file (mapped lazily, once per process)."""

    def __init__(self, path: str, offsets: np.ndarray, labels: np.ndarray) -> None:
        self.path = path
        self.offsets = offsets
        self.labels = labels
        self._map: Optional[mmap.mmap] = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Tuple[bytes, int]:
        if self._pid != os.getpid():
            with open(self.path, "rb") as handle:
                self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self._pid = os.getpid()
        return self._map[self.offsets[index]:self.offsets[index + 1]], int(self.labels[index])

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, "_map": None, "_pid": -1}


class PerSample(torch.utils.data.Dataset):
    """A shardkit dataset with batching off: the DataLoader calls ds[i] once per sample."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]


class FixedOrder(torch.utils.data.Sampler):
    """The same permutation every epoch, for every contender."""

    def __init__(self, order: np.ndarray) -> None:
        self.order = order.tolist()

    def __iter__(self) -> Any:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


def payload_list(batch: List[Tuple[Any, int]]) -> List[Any]:
    """collate_fn: the payloads as a list (variable-length, so nothing to stack; labels dropped)."""
    return [sample[0] for sample in batch]


def nbytes(payload: Any) -> int:
    """Size of a bytes-like payload (bytes, numpy array or tensor)."""
    size = getattr(payload, "nbytes", None)
    return int(size) if size is not None else len(payload)


def as_bytes(payload: Any) -> bytes:
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    return np.asarray(payload).tobytes()


# ---- data preparation ----------------------------------------------------------------
def prepare(cache: str, images: int, seed: int, formats: Sequence[str],
            shard_size: str) -> Tuple[str, Dict[str, str], List[str], np.ndarray]:
    """Generate the tree, convert it per format and write the floor file, reusing the cache."""
    base = os.path.join(cache, f"photos-{images}-seed{seed}")
    tree = os.path.join(base, "tree")
    marker = os.path.join(base, "tree.complete")
    if not os.path.exists(marker):
        shutil.rmtree(tree, ignore_errors=True)
        log(f"drawing {images} ImageNet-like JPEGs into {tree}")
        total = make_photo_tree(tree, images, seed=seed)
        with open(marker, "w") as handle:
            handle.write(f"{images} {total}\n")
    paths = sorted((os.path.relpath(os.path.join(d, f), tree).replace(os.sep, "/")
                    for d, _, files in os.walk(tree) for f in files), key=lambda rel: tuple(rel.split("/")))
    classes = sorted({rel.split("/")[0] for rel in paths})
    labels = np.array([classes.index(rel.split("/")[0]) for rel in paths], dtype=np.int64)
    datasets = {}
    for name in formats:
        # source order, so that global index i is paths[i] and the baselines read the same bytes
        dst = os.path.join(base, f"shardkit-{name}-{shard_size}-source")
        if not _complete(dst, len(paths)):
            log(f"shardkit convert {tree} {dst} --format {name} --shard-size {shard_size} --order source")
            shardkit.convert(tree, dst, format=name, shard_size=shard_size, order="source", workers=2,
                             overwrite=True, quiet=True)
        datasets[name] = dst
    floor = os.path.join(base, "floor.bin")
    offsets_file = os.path.join(base, "floor-offsets.npy")
    if not (os.path.exists(floor) and os.path.exists(offsets_file)):
        sizes = [os.path.getsize(os.path.join(tree, rel)) for rel in paths]
        with open(floor + ".tmp", "wb") as out:
            for rel in paths:
                with open(os.path.join(tree, rel), "rb") as handle:
                    out.write(handle.read())
        np.save(offsets_file, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
        os.replace(floor + ".tmp", floor)
    return floor, datasets, [os.path.join(tree, rel) for rel in paths], labels


def _complete(dst: str, count: int) -> bool:
    try:
        with open(os.path.join(dst, "manifest.json")) as handle:
            return sum(s["num_samples"] for s in json.load(handle)["shards"]) == count
    except (OSError, ValueError, KeyError):
        return False


Contender = Tuple[Callable[[], Any], Optional[Callable[[int], None]], Callable[[List[Any]], Any]]


def contenders(floor: str, datasets: Dict[str, str], paths: List[str], labels: np.ndarray) -> Dict[str, Contender]:
    """name -> (dataset factory, worker_init_fn, collate_fn), checked to serve identical bytes."""
    offsets = np.load(os.path.join(os.path.dirname(floor), "floor-offsets.npy"))
    made: Dict[str, Contender] = {}
    for name, dst in datasets.items():
        made[f"shardkit-{name}"] = (lambda dst=dst: shardkit.open_dataset(dst, decode=None),
                                    shardkit.worker_init_fn, payload_list)
        made[f"shardkit-{name} per-sample"] = (lambda dst=dst: PerSample(shardkit.open_dataset(dst, decode=None)),
                                               shardkit.worker_init_fn, payload_list)
        made[f"shardkit-{name}{ONE_BUFFER}"] = (lambda dst=dst: shardkit.open_dataset(dst, decode=None),
                                                shardkit.worker_init_fn, shardkit.collate_raw)
    made[PATHS] = (lambda: PathFiles(paths, labels), None, payload_list)
    made[FLOOR] = (lambda: MmapFloor(floor, offsets, labels), None, payload_list)
    made[FLOOR + ONE_BUFFER] = (lambda: MmapFloor(floor, offsets, labels), None, shardkit.collate_raw)
    probe = np.linspace(0, len(paths) - 1, num=min(len(paths), 25)).astype(int).tolist()
    for name, (factory, _, collate) in made.items():
        dataset = factory()
        getitems = getattr(dataset, "__getitems__", None)
        samples = getitems(probe) if getitems else [dataset[index] for index in probe]
        batch = collate(samples)
        for position, index in enumerate(probe):
            with open(paths[index], "rb") as handle:
                expected = handle.read()
            payload, label = samples[position]
            carried, carried_label = collated_sample(batch, position)
            if (as_bytes(payload) != expected or as_bytes(carried) != expected or label != labels[index]
                    or carried_label not in (None, labels[index])):
                raise SystemExit(f"{name}: sample {index} differs from {paths[index]}; not comparable")
        close = getattr(getattr(dataset, "dataset", dataset), "close", None)
        if close is not None:
            close()
    return made


def collated_sample(batch: Any, position: int) -> Tuple[Any, Optional[int]]:
    """(payload, label) of one sample of a collated batch: a RawBatch, or a list of payloads
    (label None: the list carries none)."""
    if isinstance(batch, shardkit.RawBatch):
        return batch[position].numpy(), int(batch.labels[position])
    return batch[position], None


# ---- measurement ---------------------------------------------------------------------
class WorkerPids:
    """worker_init_fn wrapper that notes each worker's pid, so its CPU time can be read from /proc."""

    def __init__(self, inner: Optional[Callable[[int], None]], count: int) -> None:
        self.inner = inner
        self.pids = multiprocessing.get_context("fork").Array("i", max(1, count))

    def __call__(self, worker_id: int) -> None:
        self.pids[worker_id] = os.getpid()
        if self.inner is not None:
            self.inner(worker_id)

    def cpu_seconds(self) -> Tuple[float, float, int]:
        """CPU time (user + system) of this process and of the workers seen so far, and the
        workers' minor page faults (fresh memory they touched)."""
        workers, faults = 0.0, 0
        for pid in self.pids[:]:
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                workers += (int(fields[11]) + int(fields[12])) / _TICKS
                faults += int(fields[7])
            except (OSError, IndexError, ValueError):
                pass    # not started yet (pid 0) or gone
        return sum(os.times()[:2]), workers, faults


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def make_loader(factory: Callable[[], Any], init: Any, collate: Callable[[List[Any]], Any], order: np.ndarray,
                args: argparse.Namespace) -> Tuple[Any, WorkerPids]:
    pids = WorkerPids(init, args.num_workers)
    loader = torch.utils.data.DataLoader(factory(), batch_size=args.batch_size, sampler=FixedOrder(order),
                                         num_workers=args.num_workers, persistent_workers=args.num_workers > 0,
                                         collate_fn=collate, worker_init_fn=pids)
    return loader, pids


def epoch(made: Tuple[Any, WorkerPids], epochs: int = 1) -> Tuple[float, int, int, float, float, int]:
    """(seconds, samples, bytes, CPU seconds of the main process and workers, CPU seconds of the
    main process alone, the workers' minor page faults) of `epochs` passes."""
    loader, pids = made
    samples = size = 0
    cpu = pids.cpu_seconds()
    started = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:     # the main process takes every payload of the batch in hand
            payloads = batch.tensors() if isinstance(batch, shardkit.RawBatch) else batch
            samples += len(payloads)
            size += sum(nbytes(payload) for payload in payloads)
    seconds = time.perf_counter() - started
    main, workers, faults = pids.cpu_seconds()
    return seconds, samples, size, main + workers - cpu[0] - cpu[1], main - cpu[0], faults - cpu[2]


def drop_caches() -> Optional[str]:
    """Empty the page cache; the reason it cannot, or None."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return None
    except OSError as exc:
        return f"cannot drop the page cache ({exc.strerror or exc}); cold runs need root"


def run(made: Dict[str, Any], order: np.ndarray, args: argparse.Namespace) -> Dict[str, Any]:
    names = list(made)
    results: Dict[str, Any] = {name: {"warm": [], "cold": []} for name in names}
    note = None
    if args.cold_repeats:
        note = drop_caches()
    if note is None:
        for repeat in range(args.cold_repeats):
            for position in range(len(names)):
                name = names[(position + repeat) % len(names)]   # rotate who goes first
                drop_caches()
                loader = make_loader(*made[name], order, args)
                results[name]["cold"].append(epoch(loader))
                del loader
                log(f"cold {repeat + 1}/{args.cold_repeats} {name}: {_rate(results[name]['cold'][-1]):.0f}/s")
    loaders = {name: make_loader(*made[name], order, args) for name in names}
    for name in names:
        epoch(loaders[name])     # start the workers and fill the page cache
    for repeat in range(args.repeats):
        for position in range(len(names)):
            name = names[(position + repeat) % len(names)]
            results[name]["warm"].append(epoch(loaders[name], args.epochs))
        log(f"warm {repeat + 1}/{args.repeats}: " + ", ".join(
            f"{name} {_rate(results[name]['warm'][-1]):.0f}/s {_cpu(results[name]['warm'][-1]) * 1e6:.0f}us"
            for name in names))
    return {"results": results, "cold_note": note}


def _rate(run: Sequence[float]) -> float:
    return run[1] / run[0]


def _cpu(run: Sequence[float]) -> float:
    return max(run[3], 1e-9) / run[1]


def summarize(results: Dict[str, Any], phase: str) -> Dict[str, Dict[str, float]]:
    """Median samples/s and MB/s per contender, and median per-repeat ratio to (b) and (a)."""
    table = {}
    for name, runs in results.items():
        done = runs[phase]
        if not done:
            continue
        row = {"samples_per_s": statistics.median(_rate(r) for r in done),
               "mb_per_s": statistics.median(r[2] / r[0] / 1e6 for r in done),
               "cpu_us_per_sample": statistics.median(r[3] / r[1] * 1e6 for r in done),
               "main_cpu_us_per_sample": statistics.median(r[4] / r[1] * 1e6 for r in done),
               "worker_faults_per_sample": statistics.median(r[5] / r[1] for r in done)}
        for key, baseline in (("x_floor", FLOOR), ("x_paths", PATHS)):
            base = results[baseline][phase]
            row[key] = statistics.median(_rate(r) / _rate(b) for r, b in zip(done, base))
        row["x_floor_iqr"] = _quartiles([_rate(r) / _rate(b) for r, b in zip(done, results[FLOOR][phase])])
        # CPU per sample of the floor over this contender's: above 1 costs less CPU than the floor.
        cpu_ratios = [_cpu(b) / _cpu(r) for r, b in zip(done, results[FLOOR][phase])]
        row["cpu_x_floor"] = statistics.median(cpu_ratios)
        row["cpu_x_floor_iqr"] = _quartiles(cpu_ratios)
        table[name] = row
    return table


def _quartiles(values: List[float]) -> Tuple[float, float]:
    """The 25th and 75th percentiles of the per-repeat ratios (how much the repeats agree)."""
    if len(values) < 2:
        return values[0], values[0]
    low, _, high = statistics.quantiles(values, n=4)
    return low, high


def _spread(value: float, quartiles: Tuple[float, float]) -> str:
    return f"{value:.2f} ({quartiles[0]:.2f}-{quartiles[1]:.2f})"


def markdown(warm: Dict[str, Dict[str, float]], cold: Dict[str, Dict[str, float]]) -> str:
    lines = ["| contender | warm samples/s | warm MB/s | warm x (b) | warm CPU us/sample | of it main process "
             "| worker page faults/sample | warm CPU x (b) "
             "| cold samples/s | cold MB/s | cold x (b) | cold x (a) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in warm.items():
        c = cold.get(name)
        cold_cells = (f"{c['samples_per_s']:.0f} | {c['mb_per_s']:.0f} | {c['x_floor']:.2f} | {c['x_paths']:.2f}"
                      if c else "- | - | - | -")
        lines.append(f"| {name} | {row['samples_per_s']:.0f} | {row['mb_per_s']:.0f} | "
                     f"{_spread(row['x_floor'], row['x_floor_iqr'])} | "
                     f"{row['cpu_us_per_sample']:.0f} | {row['main_cpu_us_per_sample']:.0f} | "
                     f"{row['worker_faults_per_sample']:.1f} | "
                     f"{_spread(row['cpu_x_floor'], row['cpu_x_floor_iqr'])} | {cold_cells} |")
    return "\n".join(lines)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=3000, help="JPEGs in the generated tree")
    parser.add_argument("--repeats", type=int, default=15, help="warm repeats per contender (median)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs timed together in one warm repeat")
    parser.add_argument("--cold-repeats", type=int, default=1,
                        help="cold first epochs per contender (0: skip cold)")
    parser.add_argument("--formats", default=",".join(format_names()),
                        help="comma-separated shardkit formats [default: every registered one]")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--shard-size", default="256MB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "shardkit-bench"),
                        help="where the tree, the datasets and the floor file are kept between runs")
    parser.add_argument("--json", dest="json_out", default=None, help="also write every epoch's numbers here")
    args = parser.parse_args(argv)
    for name in ("images", "repeats", "epochs", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.cold_repeats < 0 or args.num_workers < 0:
        parser.error("--cold-repeats and --num-workers must be 0 or more")
    formats = [name.strip() for name in args.formats.split(",") if name.strip()]
    unknown = sorted(set(formats) - set(format_names()))
    if unknown:
        parser.error(f"unknown format(s) {', '.join(unknown)}; registered: {', '.join(format_names())}")
    floor, datasets, paths, labels = prepare(args.cache, args.images, args.seed, formats, args.shard_size)
    made = contenders(floor, datasets, paths, labels)
    order = np.random.default_rng(args.seed).permutation(len(paths))
    load_before = os.getloadavg()
    out = run(made, order, args)
    load_after = os.getloadavg()
    warm, cold = summarize(out["results"], "warm"), summarize(out["results"], "cold")
    mean_kb = os.path.getsize(floor) / len(paths) / 1e3
    print(f"{len(paths)} JPEGs (mean {mean_kb:.0f} KB), batch_size={args.batch_size}, "
          f"num_workers={args.num_workers}, persistent_workers={args.num_workers > 0}, {os.cpu_count()} CPUs; "
          f"warm: median of {args.repeats} repeats of {args.epochs} epoch(s); "
          f"cold: {args.cold_repeats} first epoch(s) after drop_caches")
    print(f"1-minute load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print()
    print(markdown(warm, cold))
    if out["cold_note"]:
        print(f"\ncold runs skipped: {out['cold_note']}")
    if args.json_out:
        with open(args.json_out, "w") as handle:
            json.dump({"args": vars(args), "runs": out["results"], "warm": warm, "cold": cold,
                       "cold_note": out["cold_note"]}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
