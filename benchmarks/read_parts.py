"""Where a random ds[i] spends its time at few and at many shards, part by part, in one process.

Converts --rows CSV rows (four floats and a label) into --few and into --many shards of one
format, opens every shard once, then times the same uniform random order through:

  ds[i]          the whole per-sample path (decode=None), labels and CRC32s from the sample table
  ds[i], decoded   the same with the default decode (a float32 tensor per row), as training reads
  ds[i], shard tables   decode=None with labels and CRC32s from each shard's own tables (the path of
                 a dataset without a sample table)
  locate         global index -> (shard, row)
  locate+row     the same and the row from the dataset's cache (the row arena, rows located in their files)
  locate+reader  the same and the shard's ready reader
  reader.read    the reader's read(row) alone (shard and row found beforehand)
  label item     only one per-shard table lookup, labels.item(row)
  global label   the same lookup in one table for the whole dataset (a baseline: no shardkit code
                 reads it)

Each part's many/few ratio says how much touching another shard's objects costs it
(docs/benchmarks.md, "Many shards"). Medians of --repeats, few and many interleaved.

    PYTHONPATH=. python benchmarks/read_parts.py --format hdf5 [--rows 1000000 --few 100 --many 10000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List

import numpy as np

import shardkit
from many_shards import write_csv


def rate(action: Callable[[Any], Any], items: List[Any]) -> float:
    started = time.perf_counter()
    for item in items:
        action(item)
    return len(items) / (time.perf_counter() - started)


def parts(ds: Any, decoded: Any, untabled: Any, order: List[int]) -> Dict[str, float]:
    """Reads per second of each part of the read path over order (untabled: the same dataset read
    without its sample table)."""
    cache = ds.shard_cache
    located = [ds.locate(index) for index in order]
    pairs = [(cache.reader(shard), row) for shard, row in located]
    shards = len(ds.shard_starts) - 1
    table = np.concatenate([cache.reader(shard).labels() for shard in range(shards)])
    return {"ds[i]": rate(ds.__getitem__, order), "ds[i], decoded": rate(decoded.__getitem__, order),
            "ds[i], shard tables": rate(untabled.__getitem__, order),
            "locate": rate(ds.locate, order),
            "locate+row": rate(lambda index: cache.row(*ds.locate(index)), order),
            "locate+reader": rate(lambda index: cache.reader(ds.locate(index)[0]), order),
            "reader.read": rate(lambda pair: pair[0].read(pair[1]), pairs),
            "label item": rate(lambda pair: pair[0].labels().item(pair[1]), pairs),
            "global label": rate(table.item, order)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", default="hdf5")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--few", type=int, default=100)
    parser.add_argument("--many", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", help="keep the CSV and conversions here (reused when present)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="shardkit-parts-")
    csv = os.path.join(work, "rows.csv")
    if not os.path.isfile(csv):
        write_csv(csv, args.rows)
    datasets = {}
    for count in (args.few, args.many):
        dst = os.path.join(work, f"{args.format}-{count}")
        if not os.path.isfile(os.path.join(dst, "manifest.json")):
            shardkit.convert(csv, dst, format=args.format, label_column="label",
                             samples_per_shard=-(-args.rows // count), quiet=True)
        ds = shardkit.open_dataset(dst, decode=None)
        manifest = shardkit.manifest.load_manifest(dst)
        manifest.sample_table = None
        untabled = type(ds)(dst, decode=None, _manifest=manifest)
        decoded = shardkit.open_dataset(dst)
        for each in (ds, decoded, untabled):
            each.open_shards()
        datasets[count] = ds, decoded, untabled
    rng = np.random.default_rng(0)
    rates: Dict[str, Dict[int, List[float]]] = {}
    for _ in range(args.repeats):
        order = rng.integers(0, args.rows, args.reads).tolist()
        for count, (ds, decoded, untabled) in datasets.items():
            for name, value in parts(ds, decoded, untabled, order).items():
                rates.setdefault(name, {}).setdefault(count, []).append(value)
    print(f"| {args.format} part | {args.few} shards, us | {args.many} shards, us | many/few rate |")
    print("|---|---|---|---|")
    for name, by_count in rates.items():
        few, many = (statistics.median(by_count[count]) for count in (args.few, args.many))
        print(f"| {name} | {1e6 / few:.2f} | {1e6 / many:.2f} | {many / few:.2f}x |")


if __name__ == "__main__":
    main()
