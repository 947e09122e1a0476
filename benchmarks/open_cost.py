"""Where a shard's first open in a process goes, per format: the cost a fresh DataLoader worker
pays once per shard it touches.

For each format, the same CSV rows are converted into --shards shards; then, in this process,
every shard is opened the way the dataset opens it, repeated --repeats times (each repeat closes
everything first), and the per-shard time is split into:

  file check   checked.open_shard_file: the shard's real path inside root, open O_NOFOLLOW, fstat
  reader       fmt.open_reader on that descriptor: the format's open and shardkit's structure checks
  dataset      ds.shard_cache.reader(k) as a whole (file check + reader + identity, count and
               sample-table checks + the cache)
  placed       what a first read of a row does instead (the file opened through the held shards/
               folder, its rows located by the format's own record, checked against the sample
               table and mapped into the row arena), no reader; "-" where rows are not located
               (compressed rows, older format versions)

With --profile, the reader's time and the placed first reads' are broken down by function
(cProfile, tottime, top --top).

    PYTHONPATH=. python benchmarks/open_cost.py --rows 20000 --shards 500 --profile

Results and the machine they came from: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import statistics
import tempfile
import time
from typing import Dict, List

import shardkit
from shardkit.formats import format_names, get_format, open_shard_file, recorded_options

from many_shards import write_csv     # type: ignore[import-not-found]


def per_shard_ms(ds: shardkit.ShardDataset, stage: str) -> float:
    """Milliseconds per shard of one stage over every shard of ds, nothing open before."""
    ds.close()
    fmt = get_format(ds.manifest.format_name)
    shards = ds.manifest.shards
    paths = [os.path.join(ds.root, entry.path) for entry in shards]
    started = time.perf_counter()
    if stage == "file check":
        for path, entry in zip(paths, shards):
            os.close(open_shard_file(path, ds.root, entry.size, "shard"))
    elif stage == "reader":
        options = recorded_options(fmt, ds.manifest, ds.root)
        fds = [open_shard_file(path, ds.root, entry.size, "shard") for path, entry in zip(paths, shards)]
        started = time.perf_counter()
        readers = [fmt.open_reader(path, ds.manifest.schema, options, fd) for path, fd in zip(paths, fds)]
        elapsed = time.perf_counter() - started
        for fd in fds:
            os.close(fd)
        for reader in readers:
            reader.close()
        return 1000 * elapsed / len(paths)
    elif stage == "placed":
        cache = ds.shard_cache
        if cache.row(0, 0) is None:
            return float("nan")
        for shard in range(1, len(paths)):
            if cache.row(shard, 0) is None:
                raise SystemExit(f"shard {shard} of {ds.root} was not placed")
    else:
        with ds.shard_cache as cache:
            for shard in range(len(paths)):
                cache.reader(shard)
    elapsed = time.perf_counter() - started
    ds.close()
    return 1000 * elapsed / len(paths)


def profile_stage(ds: shardkit.ShardDataset, stage: str, top: int) -> str:
    """The reader or placed stage under cProfile: the functions with the most time of their own."""
    ds.close()
    profiler = cProfile.Profile()
    if stage == "placed":
        profiler.enable()
        for shard in range(len(ds.manifest.shards)):
            ds.shard_cache.row(shard, 0)
        profiler.disable()
        ds.close()
    else:
        fmt = get_format(ds.manifest.format_name)
        paths = [os.path.join(ds.root, entry.path) for entry in ds.manifest.shards]
        profiler.enable()
        readers = [fmt.open_reader(path, ds.manifest.schema, ds.manifest.format_options) for path in paths]
        profiler.disable()
        for reader in readers:
            reader.close()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--formats", nargs="*", default=format_names())
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--import-torch", action="store_true",
                        help="import torch first, as a DataLoader worker has: a larger heap for the garbage collector "
                        "to walk while shards open")
    args = parser.parse_args()
    if args.import_torch:
        import torch  # noqa: F401
    work = tempfile.mkdtemp(prefix="open_cost_")
    try:
        csv = os.path.join(work, "rows.csv")
        write_csv(csv, args.rows)
        datasets = {}
        for fmt in args.formats:
            dst = os.path.join(work, fmt)
            shardkit.convert(csv, dst, format=fmt, label_column="label", samples_per_shard=-(-args.rows // args.shards),
                             quiet=True)
            datasets[fmt] = shardkit.open_dataset(dst, decode=None)
        stages = ("file check", "reader", "dataset", "placed")
        times: Dict[str, Dict[str, List[float]]] = {fmt: {stage: [] for stage in stages} for fmt in args.formats}
        for _ in range(args.repeats):           # formats and stages interleaved: noise hits all alike
            for fmt, ds in datasets.items():
                for stage in stages:
                    times[fmt][stage].append(per_shard_ms(ds, stage))
        print(f"{args.rows} rows in {args.shards} shards, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}; ms per shard, median of {args.repeats}")
        print("| format | file check | reader | dataset (all of it) | placed (no reader) |")
        print("|---|---|---|---|---|")
        for fmt in args.formats:
            medians = (statistics.median(times[fmt][stage]) for stage in stages)
            print(f"| {fmt} | " + " | ".join("-" if value != value else f"{value:.3f}" for value in medians) + " |")
        if args.profile:
            for fmt, ds in datasets.items():
                for stage in ("reader", "placed"):
                    print(f"\n### {fmt}: {stage} stage by function\n")
                    print(profile_stage(ds, stage, args.top))
        for ds in datasets.values():
            ds.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
