"""First-epoch read rate from a cold page cache: ShardStream against the map-style dataset.

On one generated dataset (ImageNet-like JPEGs, passthrough, hdf5 by default), each repeat drops
the page cache (`echo 3 > /proc/sys/vm/drop_caches`, needs root) before each contender, then
reads one whole epoch of stored bytes (decode=None) in this process:
  * map-style, random order: ShardDataset through RandomSampler (what a plain Dataset gets);
  * map-style, ShardAwareSampler: shards in random order, shuffled within windows of 4 shards;
  * ShardStream: whole shards front to back, a 1,024-sample shuffle buffer.
Contenders are interleaved, medians reported. Run as root:

    PYTHONPATH=. python benchmarks/stream_read.py --images 4000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, Iterable

import torch.utils.data

import shardkit
from shardkit.samples import make_photo_tree


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as handle:
        handle.write("3\n")


def epoch(items: Iterable[Any]) -> int:
    total = 0
    for payload, _ in items:
        total += len(payload)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--format", default="hdf5")
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-stream"))
    args = parser.parse_args()
    src, dst = os.path.join(args.dir, "src"), os.path.join(args.dir, f"dst-{args.format}-{args.images}")
    if not os.path.exists(os.path.join(dst, "manifest.json")):
        shutil.rmtree(args.dir, ignore_errors=True)
        make_photo_tree(src, args.images, width=320, height=240)
        shardkit.convert(src, dst, format=args.format, shard_size="8MB", quiet=True)
    dataset = shardkit.open_dataset(dst, decode=None)

    def random_order() -> int:
        return epoch(dataset[i] for i in torch.utils.data.RandomSampler(dataset))

    def shard_aware() -> int:
        return epoch(dataset[i] for i in shardkit.ShardAwareSampler(dataset, seed=0))

    def stream() -> int:
        return epoch(shardkit.ShardStream(dst, decode=None, seed=0, num_replicas=1, rank=0))

    contenders: Dict[str, Callable[[], int]] = {
        "map-style, RandomSampler": random_order,
        "map-style, ShardAwareSampler": shard_aware,
        "ShardStream": stream,
    }
    seconds: Dict[str, list] = {name: [] for name in contenders}
    nbytes = 0
    for _ in range(args.repeat):
        for name, run in contenders.items():
            dataset.close()                # no shard stays open from the previous contender
            drop_caches()
            started = time.perf_counter()
            nbytes = run()
            seconds[name].append(time.perf_counter() - started)
    manifest = dataset.manifest
    print(f"{len(dataset)} samples, {len(manifest.shards)} {manifest.format_name} shards, "
          f"{manifest.total_bytes / 1e6:.0f} MB, cold page cache, medians of {args.repeat}, "
          f"1-min load {os.getloadavg()[0]:.1f}")
    print("| reader | median s | samples/s | MB/s | / ShardStream |")
    print("|---|---|---|---|---|")
    base = statistics.median(seconds["ShardStream"])
    for name in contenders:
        median = statistics.median(seconds[name])
        print(f"| {name} | {median:.2f} | {len(dataset) / median:,.0f} | {nbytes / median / 1e6:.1f} | "
              f"{base / median:.2f} |")


if __name__ == "__main__":
    main()
