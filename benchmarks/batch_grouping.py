"""When a batch pays to be read one pass per shard: ds.__getitems__ over batches of 256 that meet
--shards-per-batch shards, read grouped (read_many per shard) and sample by sample, in one run.

Two datasets per format, converted into --shards shards: CSV rows (four floats, fixed-shape rows)
and small PNGs stored as bytes. shardkit reads a batch grouped only when it holds at least
MIN_GROUP samples per shard on average (shardkit/read/shards.py); this script forces each way in
turn and prints µs per sample (medians of --repeats, CPU time), so the crossover can be checked.

    PYTHONPATH=. python benchmarks/batch_grouping.py [--shards 100]

Results and the machine they came from: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Dict, List

import numpy as np
from PIL import Image

import shardkit
import shardkit.read.shards as records
from many_shards import write_csv

BATCH = 256


def write_pngs(root: str, count: int) -> None:
    rng = np.random.default_rng(0)
    for index in range(count):
        folder = os.path.join(root, f"c{index % 10}")
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(os.path.join(folder, f"{index}.png"))


def batches(ds: shardkit.ShardDataset, per_batch: int, count: int, rng: np.random.Generator) -> List[List[int]]:
    """count batches of BATCH indices, each drawn uniformly from per_batch random shards."""
    starts = ds.shard_starts
    shards = len(starts) - 1
    out = []
    for _ in range(count):
        chosen = rng.choice(shards, min(per_batch, shards), replace=False)
        out.append([int(starts[s] + rng.integers(0, starts[s + 1] - starts[s])) for s in rng.choice(chosen, BATCH)])
    return out


def per_sample_us(ds: shardkit.ShardDataset, work: List[List[int]], min_group: int, repeats: int) -> float:
    records.MIN_GROUP = min_group
    times = []
    for _ in range(repeats):
        started = time.process_time()
        for batch in work:
            ds.__getitems__(batch)
        times.append(time.process_time() - started)
    return 1e6 * statistics.median(times) / (len(work) * BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--shards-per-batch", type=int, nargs="*", default=[100, 32, 16, 8, 4])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="batch_grouping_")
    csv, pngs = os.path.join(work, "rows.csv"), os.path.join(work, "pngs")
    write_csv(csv, args.samples)
    write_pngs(pngs, args.samples)
    default = records.MIN_GROUP
    print(f"MIN_GROUP = {default}; µs per sample, batches of {BATCH}")
    print("| format | samples | shards per batch | grouped | sample by sample |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for fmt in ("hdf5", "lmdb", "pt"):
        for kind, src, options in (("rows", csv, {"label_column": "label"}), ("PNG bytes", pngs, {})):
            dst = os.path.join(work, f"{fmt}-{kind.split()[0]}")
            shardkit.convert(src, dst, format=fmt, samples_per_shard=-(-args.samples // args.shards), quiet=True,
                             **options)
            with shardkit.open_dataset(dst, decode=None) as ds:
                for shard in range(len(ds.shard_starts) - 1):
                    ds.reader(shard)
                for per_batch in args.shards_per_batch:
                    order = batches(ds, per_batch, 100, rng)
                    rates: Dict[str, float] = {"grouped": per_sample_us(ds, order, 0, args.repeats),
                                               "each": per_sample_us(ds, order, 10 ** 9, args.repeats)}
                    print(f"| {fmt} | {kind} | {per_batch} | {rates['grouped']:.2f} | {rates['each']:.2f} |",
                          flush=True)
    records.MIN_GROUP = default


if __name__ == "__main__":
    main()
