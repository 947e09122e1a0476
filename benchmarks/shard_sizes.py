"""Shard sizes against --shard-size, per format, for a generated numeric table (and an image tree).

    python benchmarks/shard_sizes.py [--rows 500000] [--shard-size 4MiB] [--images 0]

Prints, per format and source, the number of shards, the largest shard, whether every shard with
more than one sample stays within the limit, the dataset's total bytes and its ratio to HDF5's.
Sizes only: nothing here is timed.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

import shardkit
from shardkit.samples import make_image_tree
from shardkit.units import parse_size


def write_table(path: Path, rows: int, seed: int = 0) -> None:
    """rows × 4 float columns and a 3-class label column."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(rows, 4)).round(5)
    with open(path, "w") as handle:
        handle.write("a,b,c,d,kind\n")
        for start in range(0, rows, 100_000):
            block = values[start:start + 100_000]
            handle.write("".join(f"{a},{b},{c},{d},{'xyz'[(start + n) % 3]}\n"
                                 for n, (a, b, c, d) in enumerate(block.tolist())))


def measure(src: Path, dst: Path, fmt: str, shard_size: str, **options: object) -> dict:
    shardkit.convert(str(src), str(dst), format=fmt, shard_size=shard_size, quiet=True, **options)
    manifest = json.loads((dst / "manifest.json").read_text())
    limit = parse_size(shard_size)
    sizes = [entry["size"] for entry in manifest["shards"]]
    within = all(entry["size"] <= limit for entry in manifest["shards"] if entry["num_samples"] > 1)
    return {"format": fmt, "shards": len(sizes), "largest": max(sizes), "limit": limit, "within": within,
            "total": sum(sizes), "samples": manifest["num_samples"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--images", type=int, default=0)
    parser.add_argument("--shard-size", default="4MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cases = [("table", root / "rows.csv", {"label_column": "kind"})]
        write_table(cases[0][1], args.rows)
        if args.images:
            make_image_tree(str(root / "tree"), num_images=args.images, seed=1)
            cases.append(("images", root / "tree", {}))
        for name, src, options in cases:
            results = [measure(src, root / f"{name}-{fmt}", fmt, args.shard_size, **options)
                       for fmt in ("hdf5", "lmdb", "pt")]
            base = results[0]["total"]
            print(f"{name}: {results[0]['samples']} samples, --shard-size {args.shard_size} "
                  f"({results[0]['limit']} bytes), source {os.path.getsize(src) if src.is_file() else 'tree'}")
            for row in results:
                print(f"  {row['format']:5} shards {row['shards']:4}  largest {row['largest']:>11,}  "
                      f"within limit: {'yes' if row['within'] else 'NO '}  total {row['total']:>12,}  "
                      f"vs hdf5 {row['total'] / base:.2f}x")


if __name__ == "__main__":
    main()
