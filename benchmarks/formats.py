"""Which format to pick: every registered format on one generated ImageNet-like tree.

Measured per format, medians of --runs runs, ratios against HDF5 measured in the same run:
  size on disk          shard bytes, and their overhead over the payload (the JPEG files)
  conversion            seconds and peak RSS of `convert` (a fresh process each)
  open cost per shard   open_reader + len + close, warm and cold page cache
  random reads          samples/s of raw payloads through DataLoader(batch_size=256,
                        num_workers=2, collate_fn=list) in a random order; warm (many
                        epochs' worth of indices) and cold (the first epoch after
                        `echo 3 > /proc/sys/vm/drop_caches`), LMDB with readahead on and
                        off; baseline: the same reads from the image files themselves
                        (ImageFolder style)
  reader memory         peak RssAnon / RssFile of the loader's worker processes
  cache-miss reads      a dataset much larger than RAM, simulated: every shard file is evicted
                        from the page cache (posix_fadvise DONTNEED) before each random read;
                        samples/s and KiB read from the device per sample (/proc/diskstats,
                        machine-wide: other processes' I/O adds a little)
  re-sharding           hdf5 -> lmdb -> pt -> hdf5 from shards: seconds, peak RSS, identical

Cold numbers need root (drop_caches); without it they are skipped with a note.

    PYTHONPATH=. python benchmarks/formats.py                       # 1.5-3 min on 2 cores
    PYTHONPATH=. python benchmarks/formats.py --images 36000 --unique 2000 --runs 1 \
        --warm-samples 0 --shard-size 256MB --miss-samples 100          # 2 GB, ~6 min + the tree

Results: docs/benchmarks.md ("Format choice"); their reading: docs/formats.md.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import sys
import threading
import time
import zlib
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch.utils.data

import shardkit
from shardkit.formats import format_names, get_format
from shardkit.manifest import load_manifest
from shardkit.samples import make_photo_tree
from shardkit.schema import SampleSchema

MiB = 1 << 20


# ---- inputs ---------------------------------------------------------------------------
def make_tree(work: str, images: int, unique: int, seed: int = 0) -> Tuple[str, List[str]]:
    """A tree of `images` JPEGs (about 500x375), `unique` of them drawn and the rest copies."""
    root = os.path.join(work, f"tree-{images}-{unique}")
    if not os.path.exists(os.path.join(root, ".complete")):
        shutil.rmtree(root, ignore_errors=True)
        drawn = os.path.join(work, f"drawn-{unique}")
        if not os.path.exists(os.path.join(drawn, ".complete")):
            shutil.rmtree(drawn, ignore_errors=True)
            make_photo_tree(drawn, unique, seed=seed)
            open(os.path.join(drawn, ".complete"), "w").close()
        originals = sorted(os.path.join(d, f) for d, _, fs in os.walk(drawn) for f in fs if f.endswith(".jpg"))
        for number in range(images):
            source = originals[number % len(originals)]
            folder = os.path.join(root, os.path.basename(os.path.dirname(source)))
            os.makedirs(folder, exist_ok=True)
            shutil.copyfile(source, os.path.join(folder, f"{number:07d}.jpg"))
        open(os.path.join(root, ".complete"), "w").close()
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))
    return root, files


def can_drop_caches() -> bool:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("1\n")
        return True
    except OSError:
        return False


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as handle:
        handle.write("3\n")


# ---- conversion in a fresh process ----------------------------------------------------
def _convert_child(src: str, dst: str, fmt: str, options: Dict[str, Any], queue: Any) -> None:
    started = time.perf_counter()
    shardkit.convert(src, dst, format=fmt, overwrite=True, quiet=True, **options)
    queue.put((time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))


def convert_measured(src: str, dst: str, fmt: str, **options: Any) -> Tuple[float, float]:
    """(seconds, peak RSS MiB) of one conversion in a spawned process."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_convert_child, args=(src, dst, fmt, options, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


# ---- reading --------------------------------------------------------------------------
class Files(torch.utils.data.Dataset):
    """Baseline: each sample is one image file, read by its path (ImageFolder style)."""

    def __init__(self, paths: List[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> bytes:
        with open(self.paths[index], "rb") as handle:
            return handle.read()


def as_bytes(payload: Any) -> bytes:
    """Ship plain bytes from the workers whatever the reader returned (one copy at most)."""
    return payload if type(payload) is bytes else memoryview(payload).tobytes()


def collate_list(batch: list) -> list:
    return batch


class Peaks:
    """Samples RssAnon / RssFile of this process's children (the loader workers) in a thread."""

    def __init__(self) -> None:
        self.anon = self.file = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Peaks":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = str(os.getpid())
        while not self._stop.wait(0.05):
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/status") as handle:
                        status = dict(line.split(":", 1) for line in handle if ":" in line)
                except OSError:
                    continue
                if status.get("PPid", "").strip() == me and "RssAnon" in status:
                    self.anon = max(self.anon, int(status["RssAnon"].split()[0]) // 1024)
                    self.file = max(self.file, int(status["RssFile"].split()[0]) // 1024)


def read_rate(make_dataset: Callable[[], Any], samples: int, seed: int, cold: bool,
              batch_size: int, workers: int) -> Tuple[float, int, int]:
    """(samples/s, peak worker RssAnon MiB, peak worker RssFile MiB) of random raw reads."""
    if cold:
        drop_caches()
    dataset = make_dataset()
    sampler = torch.utils.data.RandomSampler(dataset, num_samples=samples,
                                             generator=torch.Generator().manual_seed(seed))
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                                         collate_fn=collate_list, worker_init_fn=shardkit.worker_init_fn)
    with Peaks() as peaks:
        started = time.perf_counter()
        count = sum(len(batch) for batch in loader)
        seconds = time.perf_counter() - started
    assert count == samples
    dataset.close()
    return samples / seconds, peaks.anon, peaks.file


def open_cost(dst: str, cold: bool, **options: Any) -> float:
    """Median microseconds to open a shard, check its structure, count it and close it."""
    manifest = load_manifest(dst)
    fmt = get_format(manifest.format_name)
    if cold:
        drop_caches()
    times = []
    for entry in manifest.shards:
        started = time.perf_counter()
        reader = fmt.open_reader(os.path.join(dst, entry.path), manifest.schema,
                                 {**manifest.format_options, **options})
        len(reader)
        reader.close()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def device_read_bytes() -> int:
    """Bytes read so far from the device holding the work folder (0 when unknown)."""
    name = _DEVICE.get("name")
    try:
        with open("/proc/diskstats") as handle:
            for line in handle:
                fields = line.split()
                if fields[2] == name:
                    return int(fields[5]) * 512
    except OSError:
        pass
    return 0


_DEVICE: Dict[str, str] = {}


def cache_miss_reads(dst: str, samples: int, seed: int, **options: Any) -> Tuple[float, float]:
    """(samples/s, KiB read from the device per sample) of random reads that all miss the cache."""
    manifest = load_manifest(dst)
    fmt = get_format(manifest.format_name)
    paths = [os.path.join(dst, entry.path) for entry in manifest.shards]
    fds = [os.open(path, os.O_RDONLY) for path in paths]
    readers = [fmt.open_reader(path, manifest.schema, {**manifest.format_options, **options}) for path in paths]
    rng = random.Random(seed)
    seconds = 0.0
    before = device_read_bytes()
    for _ in range(samples):
        shard = rng.randrange(len(readers))
        index = rng.randrange(len(readers[shard]))
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        started = time.perf_counter()
        zlib.crc32(readers[shard].read(index).payload)
        seconds += time.perf_counter() - started
    read = device_read_bytes() - before
    for reader in readers:
        reader.close()
    for fd in fds:
        os.close(fd)
    return samples / seconds, read / samples / 1024


# ---- the run --------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000, help="samples in the tree")
    parser.add_argument("--unique", type=int, default=500, help="distinct images drawn (the rest are copies)")
    parser.add_argument("--shard-size", default="32MB")
    parser.add_argument("--runs", type=int, default=3, help="runs per read measurement (median)")
    parser.add_argument("--warm-samples", type=int, default=10000, help="indices read per warm measurement")
    parser.add_argument("--miss-samples", type=int, default=150, help="reads per cache-miss measurement")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--formats", default=",".join(format_names()))
    parser.add_argument("--work", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                       "formats"))
    parser.add_argument("--no-cold", action="store_true", help="skip cold page cache measurements")
    parser.add_argument("--json", default=None, help="also write the raw numbers to this file")
    args = parser.parse_args(argv)
    formats = [name for name in args.formats.split(",") if name]
    os.makedirs(args.work, exist_ok=True)
    cold = not args.no_cold and can_drop_caches()
    began = time.perf_counter()
    tree, files = make_tree(args.work, args.images, min(args.unique, args.images))
    payload_bytes = sum(os.path.getsize(path) for path in files)
    notes = [f"{len(files)} JPEGs, {payload_bytes / 1e6:.0f} MB ({payload_bytes / len(files) / 1e3:.0f} kB each), "
             f"--shard-size {args.shard_size}; {os.cpu_count()} CPUs, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM, "
             f"torch {torch.__version__}, {args.runs} runs (median)"]
    notes.append(_readahead_note(args.work))
    notes.append("cache-miss reads: one process, no DataLoader; each shard file evicted before each read")
    if not cold:
        notes.append("cold page cache: skipped (" + ("--no-cold" if args.no_cold else
                                                     "needs root to write /proc/sys/vm/drop_caches") + ")")
    numbers: Dict[str, Dict[str, Any]] = {}

    dsts = {}
    for name in formats:
        dst = os.path.join(args.work, f"ds-{name}-{len(files)}")
        seconds, rss = convert_measured(tree, dst, name, shard_size=args.shard_size)
        manifest = load_manifest(dst)
        dsts[name] = dst
        numbers[name] = {"size": manifest.total_bytes, "shards": len(manifest.shards), "convert_s": seconds,
                         "convert_rss": rss,
                         "open_warm_us": statistics.median(open_cost(dst, False) for _ in range(args.runs))}
        if cold:
            numbers[name]["open_cold_us"] = statistics.median(open_cost(dst, True) for _ in range(args.runs))

    variants: List[Tuple[str, Callable[[], Any]]] = [("image files (baseline)", lambda: Files(files))]
    for name in formats:
        def opener(dst: str = dsts[name], **options: Any) -> Callable[[], Any]:
            return lambda: shardkit.open_dataset(dst, decode=None, transform=as_bytes, **options)
        if name == "lmdb":
            variants += [("lmdb readahead on", opener(readahead=True)),
                         ("lmdb readahead off", opener(readahead=False))]
        else:
            variants.append((name, opener()))
    reads: Dict[str, Dict[str, Any]] = {}
    for label, make in variants:
        read_rate(make, len(files), 99, False, args.batch_size, args.workers)     # warm the page cache
        warm = [read_rate(make, max(args.warm_samples, len(files)), run, False, args.batch_size, args.workers)
                for run in range(args.runs)]
        reads[label] = {"warm": statistics.median(r[0] for r in warm), "anon": max(r[1] for r in warm),
                        "file": max(r[2] for r in warm)}
        if cold:
            first = [read_rate(make, len(files), 100 + run, True, args.batch_size, args.workers)
                     for run in range(args.runs)]
            reads[label]["cold"] = statistics.median(r[0] for r in first)
            reads[label]["anon"] = max(reads[label]["anon"], max(r[1] for r in first))
            reads[label]["file"] = max(reads[label]["file"], max(r[2] for r in first))

    misses: Dict[str, Dict[str, float]] = {}
    for name in formats:
        has_readahead = "readahead" in get_format(name).default_options(SampleSchema(kind="image"), 0)
        for options in ([{"readahead": True}, {"readahead": False}] if has_readahead else [{}]):
            label = name + "".join(f" readahead {'on' if value else 'off'}" for value in options.values())
            runs = [cache_miss_reads(dsts[name], args.miss_samples, run, **options) for run in range(args.runs)]
            misses[label] = {"rate": statistics.median(r[0] for r in runs),
                             "kib": statistics.median(r[1] for r in runs)}

    reshard = _reshard(dsts, args.work, formats)
    print("\n".join(_tables(numbers, reads, misses, reshard, payload_bytes, cold, notes)))
    print(f"\n(total {time.perf_counter() - began:.0f} s)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"notes": notes, "formats": numbers, "reads": reads, "cache_miss_reads": misses,
                       "reshard": reshard}, handle, indent=2)


def _readahead_note(work: str) -> str:
    device = os.stat(work).st_dev
    path = f"/sys/dev/block/{os.major(device)}:{os.minor(device)}"
    try:
        _DEVICE["name"] = os.path.basename(os.path.realpath(path))
    except OSError:
        pass
    for candidate in (f"{path}/queue/read_ahead_kb", f"{path}/../queue/read_ahead_kb"):
        try:
            with open(candidate) as handle:
                return f"block device readahead (read_ahead_kb): {handle.read().strip()} KiB"
        except OSError:
            continue
    return "block device readahead: unknown"


def _reshard(dsts: Dict[str, str], work: str, formats: List[str]) -> List[Dict[str, Any]]:
    """hdf5 -> lmdb -> pt -> hdf5 from shards (formats present only), in fresh processes."""
    chain = [name for name in ("hdf5", "lmdb", "pt") if name in formats]
    if len(chain) < 2:
        return []
    steps = []
    current = dsts[chain[0]]
    for target in chain[1:] + chain[:1]:
        dst = os.path.join(work, f"reshard-{target}")
        seconds, rss = convert_measured(current, dst, target, samples_per_shard=500)
        steps.append({"step": f"{load_manifest(current).format_name} -> {target}", "seconds": seconds, "rss": rss})
        current = dst
    first, last = shardkit.open_dataset(dsts[chain[0]], decode=None), shardkit.open_dataset(current, decode=None)
    same = len(first) == len(last) and all(
        as_bytes(first.read_encoded(i).payload) == as_bytes(last.read_encoded(i).payload) for i in range(len(first)))
    steps.append({"step": "identical samples after the round trip", "same": same})
    return steps


def _tables(numbers: Dict[str, Dict[str, Any]], reads: Dict[str, Dict[str, Any]],
            misses: Dict[str, Dict[str, float]], reshard: List[Dict[str, Any]],
            payload_bytes: int, cold: bool, notes: List[str]) -> List[str]:
    base = numbers.get("hdf5")
    out = ["### Storage, conversion, open cost", "",
           "| format | shards | size on disk | vs JPEG bytes | convert s | vs hdf5 | convert peak RSS | "
           "open/shard warm | open/shard cold |", "|---|---|---|---|---|---|---|---|---|"]
    for name, n in numbers.items():
        ratio = f"{n['convert_s'] / base['convert_s']:.2f}x" if base else "-"
        cold_open = f"{n['open_cold_us'] / 1000:.2f} ms" if "open_cold_us" in n else "-"
        out.append(f"| {name} | {n['shards']} | {n['size'] / 1e6:.1f} MB | {n['size'] / payload_bytes - 1:+.1%} | "
                   f"{n['convert_s']:.1f} | {ratio} | {n['convert_rss']:.0f} MiB | {n['open_warm_us'] / 1000:.2f} ms | "
                   f"{cold_open} |")
    hdf5 = reads.get("hdf5")
    out += ["", "### Random reads of raw payloads (DataLoader, collate_fn=list)", "",
            "| reader | warm samples/s | vs hdf5 | cold 1st epoch samples/s | vs hdf5 "
            "| worker peak RssAnon / RssFile |",
            "|---|---|---|---|---|---|"]
    for label, r in reads.items():
        warm_ratio = f"{r['warm'] / hdf5['warm']:.2f}x" if hdf5 else "-"
        cold_rate = f"{r['cold']:.0f}" if cold else "-"
        cold_ratio = f"{r['cold'] / hdf5['cold']:.2f}x" if cold and hdf5 else "-"
        out.append(f"| {label} | {r['warm']:.0f} | {warm_ratio} | {cold_rate} | {cold_ratio} | "
                   f"{r['anon']} / {r['file']} MiB |")
    if misses:
        base_miss = misses.get("hdf5") or misses.get("hdf5 readahead on")
        out += ["", "### Every read a cache miss (a dataset much larger than RAM, simulated)", "",
                "| reader | samples/s | vs hdf5 | KiB read from the device per sample |", "|---|---|---|---|"]
        for label, miss in misses.items():
            ratio = f"{miss['rate'] / base_miss['rate']:.2f}x" if base_miss else "-"
            out.append(f"| {label} | {miss['rate']:.0f} | {ratio} | {miss['kib']:.0f} |")
    if reshard:
        out += ["", "### Re-sharding from shards (fresh process per step)", "", "| step | seconds | peak RSS |",
                "|---|---|---|"]
        for step in reshard:
            if "same" in step:
                out.append(f"| {step['step']} | {'yes' if step['same'] else 'NO'} | |")
            else:
                out.append(f"| {step['step']} | {step['seconds']:.1f} | {step['rss']:.0f} MiB |")
    out += ["", *[f"- {note}" for note in notes]]
    return out


if __name__ == "__main__":
    sys.exit(main())
