"""What spreading the same rows over more shards costs a read, without files or shardkit.

Builds --rows rows of 16 bytes (and an int64 label and uint32 CRC each) held in memory by --few and
by --many small Python objects, one per "shard", each with its own numpy arrays, and reads
--reads random rows through a read method, in one process. Two readers:

  like a reader   a slice of the shard's bytes viewed as float32, its label and CRC as Python ints,
                  through attributes as a shard reader keeps them
  lean            one tuple of a 2-D row view and the two tables, .item() for the ints

No file, map or DataLoader is involved: the ratio many/few is what the cache misses of touching
a different shard's objects on every read cost by themselves (docs/benchmarks.md, "Many shards").

    python benchmarks/dispersion.py [--rows 1000000] [--few 100] [--many 10000] [--reads 300000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, List, Tuple

import numpy as np


class LikeAReader:
    """State as a shard reader keeps it: attributes, a flat byte array and two tables."""

    def __init__(self, rows: int, rng: np.random.Generator) -> None:
        self.flat = rng.integers(0, 256, 16 * rows, dtype=np.uint8)
        self.labels = rng.integers(0, 10, rows).astype(np.int64)
        self.crcs = rng.integers(0, 2 ** 32, rows).astype(np.uint32)
        self.shift, self.row, self.chunk = [0], 16, 1 << 20
        self.dtype, self.shape = np.dtype("<f4"), (4,)

    def read(self, index: int) -> Tuple[Any, int, int]:
        chunk = index * self.row // self.chunk
        begin = self.shift[chunk] + index * self.row
        return (self.flat[begin:begin + self.row].view(self.dtype).reshape(self.shape), int(self.labels[index]),
                int(self.crcs[index]))


class Lean:
    """The same rows, labels and CRCs behind one slot."""

    __slots__ = ("tables",)

    def __init__(self, rows: int, rng: np.random.Generator) -> None:
        flat = rng.integers(0, 256, 16 * rows, dtype=np.uint8)
        self.tables = (flat.view("<f4").reshape(rows, 4), rng.integers(0, 10, rows).astype(np.int64),
                       rng.integers(0, 2 ** 32, rows).astype(np.uint32))

    def read(self, index: int) -> Tuple[Any, int, int]:
        rows, labels, crcs = self.tables
        return rows[index], labels.item(index), crcs.item(index)


def rate(shards: List[Any], rows: int, reads: int, rng: np.random.Generator) -> float:
    """Random reads per second over the shards."""
    picks = rng.integers(0, len(shards), reads).tolist()
    locals_ = rng.integers(0, rows, reads).tolist()
    started = time.perf_counter()
    for shard, local in zip(picks, locals_):
        shards[shard].read(local)
    return reads / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--few", type=int, default=100)
    parser.add_argument("--many", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("| reader | few /s | many /s | many / few |\n|---|---|---|---|")
    for cls in (LikeAReader, Lean):
        held = {count: [cls(args.rows // count, rng) for _ in range(count)] for count in (args.few, args.many)}
        ratios, rates = [], {args.few: [], args.many: []}
        for _ in range(args.repeats):
            pair = {count: rate(shards, args.rows // count, args.reads, rng) for count, shards in held.items()}
            for count, value in pair.items():
                rates[count].append(value)
            ratios.append(pair[args.many] / pair[args.few])
        few, many = (statistics.median(rates[count]) for count in (args.few, args.many))
        print(f"| {cls.__name__} | {few:,.0f} | {many:,.0f} | {statistics.median(ratios):.2f}x |")


if __name__ == "__main__":
    main()
