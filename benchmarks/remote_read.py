"""Reading a dataset at a URL through the local shard cache, against reading it from local disk and
against pulling it first, from servers on this machine.

One generated dataset (benchmarks/remote.py's table of random float32 rows, about --mb megabytes in
shards of --shard-size) is served by a local HTTP server and pushed to moto's S3 server (in a process
of its own), both on 127.0.0.1. An epoch is one pass of `shardkit.ShardStream` (shuffled shard order, every sample
decoded to a float32 tensor, no DataLoader workers). For each store, each repeat runs, interleaved:
  * local: the next epoch of a stream of the dataset on local disk (the baseline of the cached epoch);
  * cached: the next epoch of a stream of the URL whose first epoch filled its cache (an epoch
    after the first, as a training loop reads them: no store is asked anything);
  * first: a stream of the URL opened with an empty cache, and its first epoch: the manifest and
    each shard fetched, checked, fsynced on its first use, the next two prefetched meanwhile;
  * pull, then read: `shardkit.pull` into an empty folder, then a stream of that folder opened
    and its first epoch (the baseline of the first epoch).
Each repeat runs the two pairs (local and cached, first and pull-then-read) back to back, the
pairs and the runs within each in alternating orders. Medians of the times are reported, and the
targets' ratios as the medians of each repeat's ratio, in one run:

    python benchmarks/remote_read.py --repeat 8          # about 100 MB, 8 MB shards
    python benchmarks/remote_read.py --mb 500 --shard-size 32MB --repeat 4
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))      # remote.py's dataset and servers

import shardkit  # noqa: E402
from remote import make_dataset, stores_of  # noqa: E402


def epoch(root: str, **options: Any) -> int:
    """Samples of one ShardStream epoch of root, opened here (the stream is closed after)."""
    stream = shardkit.ShardStream(root, seed=1, **options)
    try:
        return sum(1 for _ in stream)
    finally:
        stream.dataset.close()


def next_epoch(stream: Any) -> int:
    """Samples of the next epoch of a stream opened before (as a training loop reads epoch after epoch)."""
    stream.set_epoch(stream.epoch + 1)
    return sum(1 for _ in stream)


def timed(run: Callable[[], Any], expected: int) -> Tuple[float, float]:
    """(seconds, CPU seconds of this process) run() takes; it must read the whole epoch."""
    started, cpu = time.perf_counter(), time.process_time()
    samples = run()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if samples not in (None, expected):
        sys.exit(f"an epoch gave {samples} samples, not {expected}")
    return seconds, cpu


def compare(name: str, url: str, options: Dict[str, Any], dst: Path, work: Path, repeat: int) -> None:
    warm, cold, pulled = work / "warm-cache", work / "cold-cache", work / "pulled"
    shutil.rmtree(warm, ignore_errors=True)
    local = shardkit.ShardStream(str(dst), seed=1)
    cached = shardkit.ShardStream(url, seed=1, cache_dir=warm, storage_options=options)
    expected = next_epoch(cached)       # the first epoch fills the cache, untimed

    def pull_then_read() -> None:
        shardkit.pull(url, str(pulled), storage_options=options)
        assert epoch(str(pulled)) == expected

    contenders: Dict[str, Callable[[], Any]] = {
        "local": lambda: next_epoch(local),
        "cached": lambda: next_epoch(cached),
        "first": lambda: epoch(url, cache_dir=cold, storage_options=options),
        "pull, then read": pull_then_read,
    }
    seconds: Dict[str, List[Tuple[float, float]]] = {label: [] for label in contenders}
    for turn in range(repeat):
        pairs = [["local", "cached"], ["first", "pull, then read"]]
        for pair in pairs[::-1] if turn % 2 else pairs:    # each pair back to back, in both orders
            for label in pair[::-1] if turn % 4 >= 2 else pair:
                shutil.rmtree(cold, ignore_errors=True)
                shutil.rmtree(pulled, ignore_errors=True)
                seconds[label].append(timed(contenders[label], expected))
    report(name, dst, expected, seconds)


def report(name: str, dst: Path, samples: int, seconds: Dict[str, List[Tuple[float, float]]]) -> None:
    """The medians, and the targets' ratios as medians of the ratios of each repeat's pair (runs
    back to back share the machine's load of the moment, which varies here by 2x and more); the
    same for the CPU time of this process (the servers' threads included), which the load of
    other processes changes less."""
    shards = list((dst / "shards").iterdir())
    print(f"\n{name}: {samples} samples, {sum(f.stat().st_size for f in shards) / 1e6:.0f} MB in {len(shards)} "
          f"shards, {len(seconds['local'])} repeats")
    print("| contender | seconds (median) | CPU seconds (median) | all runs (seconds) |\n|---|---:|---:|---|")
    for label, runs in seconds.items():
        print(f"| {label} | {statistics.median(run[0] for run in runs):.2f} | "
              f"{statistics.median(run[1] for run in runs):.2f} | {', '.join(f'{run[0]:.2f}' for run in runs)} |")
    for kind, at in (("seconds", 0), ("CPU seconds", 1)):
        cached = statistics.median(a[at] / b[at] for a, b in zip(seconds["local"], seconds["cached"]))
        first = statistics.median(a[at] / b[at] for a, b in zip(seconds["first"], seconds["pull, then read"]))
        print(f"{kind}: cached epoch rate / local epoch rate {cached:.2f}x (target >= 0.95x); "
              f"first epoch / (pull, then read) {first:.2f}x (target <= 1.2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="dataset size in MB")
    parser.add_argument("--shard-size", default="8MB", help="shard size (--shard-size of convert)")
    parser.add_argument("--repeat", type=int, default=3, help="repeats of the four contenders")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-remote-read"))
    parser.add_argument("--stores", default="http,s3", help="comma-separated: http, s3 (moto), s3-rclone")
    args = parser.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    dst = make_dataset(Path(args.work), args.mb, args.shard_size)
    for name, url, options in stores_of(dst, args.stores.split(",")):
        compare(name, url, options, dst, Path(args.work), args.repeat)


if __name__ == "__main__":
    main()
