"""open_dataset, verify --quick, verify and convert on the same rows cut into few and into many shards.

Builds one CSV (--rows rows of 4 floats and a label), converts it into --few and --many shards
(--samples-per-shard chosen to fit), and writes a synthetic manifest of --synthetic shards (the
many-shard manifest's entries repeated; the shard files do not exist, so only open_dataset is
timed on it). Every operation runs in a fresh child process, once per repeat, for this tree and,
with --baseline REF, for that git ref of this repository exported next to it; the two are
interleaved so both see the same machine load. Prints medians (seconds) and candidate/baseline
ratios, and the cost of convert per extra shard, (time(many) - time(few)) / (many - few), split into
writing the shard (the time in write_shard_file: encoding its rows, the format writing the file)
and the fixed cost (everything else: fsyncs, rename, hash, done record, manifest entry); the split
needs --workers 1. quick-own is verify --quick with a peek that costs nothing (the manifest's own
values), in this one process (no workers, no LMDB child processes): verify's own cost per shard,
whatever the format's peek costs. hash is the floor of full: sha256 of every file in DST, one
after the other, in this one process (hashlib.file_digest), which verify's full mode must at
least do.

    python benchmarks/many_shards_ops.py [--rows 20000] [--few 100] [--many 10000] [--synthetic 100000]
        [--convert-many 2000] [--repeat 3] [--format hdf5] [--baseline main] [--workers 1]
        [--ops open,quick,quick-own,full,hash,convert] [--keep DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent.parent

#: Run in the child: time one operation on DST with the shardkit found on sys.path.
CHILD = r"""
import json, sys, time
op, src, dst, fmt, per_shard, workers = sys.argv[1:7]
import shardkit
from shardkit.ops.verification import verify
import shutil
import shardkit.read.dataset
writing = [0.0]
if op == "convert":
    shutil.rmtree(dst, ignore_errors=True)
    import shardkit.writing.conversion
    write_shard_file = shardkit.writing.conversion.write_shard_file

    def timed_write(*args, **kwargs):
        began = time.perf_counter()
        try:
            return write_shard_file(*args, **kwargs)
        finally:
            writing[0] += time.perf_counter() - began
    shardkit.writing.conversion.write_shard_file = timed_write      # in this process: --workers 1
if op == "quick-own":
    # verify --quick with a peek that costs nothing (the manifest's own values): what verify
    # itself spends per shard (stat, open, checks), whatever the format's peek costs
    from shardkit.formats import get_format
    from shardkit.formats.base import ShardFormat
    from shardkit.manifest import load_manifest
    if not hasattr(ShardFormat, "peek"):            # a tree before the hook: nothing to measure
        print(json.dumps([float("nan"), 0.0]))
        sys.exit(0)
    manifest = load_manifest(dst)
    counts = dict(zip(manifest.shards.paths, manifest.shards.num_samples.tolist()))
    type(get_format(fmt)).peek = lambda self, path, schema, options: (
        counts["shards/" + path.rsplit("/", 1)[1]], manifest.dataset_id)
    type(get_format(fmt)).crafted_files_crash = False       # in this process, where the patch holds
    workers = "1"
    op = "quick"
start = time.perf_counter()
if op == "open":
    ds = shardkit.open_dataset(dst)
    assert len(ds) > 0
elif op in ("quick", "full"):
    report = verify(dst, mode=op, workers=int(workers))
    assert report.ok, report.problems[:3]
elif op == "hash":
    import hashlib, os
    for folder, _, names in os.walk(dst):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                hashlib.file_digest(handle, "sha256")
elif op == "convert":
    shardkit.convert(src, dst, format=fmt, samples_per_shard=int(per_shard), label_column="kind", quiet=True,
                     workers=int(workers))
print(json.dumps([time.perf_counter() - start, writing[0]]))
"""


def write_table(path: Path, rows: int) -> None:
    """rows × 4 float columns and a 3-class label column."""
    values = np.random.default_rng(0).normal(size=(rows, 4)).round(5).tolist()
    with open(path, "w") as handle:
        handle.write("a,b,c,d,kind\n")
        handle.writelines(f"{a},{b},{c},{d},{'xyz'[n % 3]}\n" for n, (a, b, c, d) in enumerate(values))


def synthetic_manifest(model: Path, dst: Path, shards: int) -> None:
    """DST/manifest.json listing `shards` entries made from model's (files absent), self-checksummed."""
    data = json.loads((model / "manifest.json").read_text())
    entries = data["shards"]
    out, first = [], 0
    for number in range(shards):
        entry = dict(entries[number % len(entries)], path=f"shards/shard-{number:07d}.syn", first_index=first)
        first += entry["num_samples"]
        out.append(entry)
    data.update(shards=out, num_samples=first)
    data.pop("manifest_sha256")
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    data["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    dst.mkdir(parents=True)
    (dst / "manifest.json").write_text(json.dumps(data, indent=2, sort_keys=True))


def export(ref: str, where: Path) -> Path:
    """A copy of this repository's tree at git ref REF."""
    where.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(HERE), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return where


def timed(tree: Path, op: str, src: Path, dst: Path, fmt: str, per_shard: int, workers: int) -> Tuple[float, float]:
    """(seconds of the operation, seconds of it spent in write_shard_file: encoding and writing shards)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, op, str(src), str(dst), fmt, str(per_shard), str(workers)],
                         env=env, check=True, capture_output=True, text=True, cwd=str(tree))
    total, writing = json.loads(out.stdout.strip().splitlines()[-1])
    return float(total), float(writing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--few", type=int, default=100)
    parser.add_argument("--many", type=int, default=10_000)
    parser.add_argument("--synthetic", type=int, default=100_000)
    parser.add_argument("--convert-many", type=int, default=2_000, help="shards of the timed many-shard convert")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--format", default="hdf5")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--baseline", default=None, help="git ref to compare against (e.g. main)")
    parser.add_argument("--ops", default="open,quick,full,hash,convert")
    parser.add_argument("--keep", default=None, help="folder for the datasets, reused by later runs")
    args = parser.parse_args()
    ops = args.ops.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        trees: Dict[str, Path] = {"candidate": HERE}
        if args.baseline:
            trees = {"baseline": export(args.baseline, Path(tmp) / "baseline"), "candidate": HERE}
        src = root / f"rows-{args.rows}.csv"
        if not src.exists():
            write_table(src, args.rows)
        import shardkit
        datasets: Dict[int, Path] = {}
        for shards in (args.few, args.many):
            datasets[shards] = root / f"{args.format}-{args.rows}-{shards}"
            if not (datasets[shards] / "manifest.json").exists():
                shardkit.convert(str(src), str(datasets[shards]), format=args.format, label_column="kind",
                                 samples_per_shard=-(-args.rows // shards), quiet=True, overwrite=True)
        synthetic = root / f"{args.format}-{args.rows}-{args.synthetic}-synthetic"
        if not (synthetic / "manifest.json").exists():
            shutil.rmtree(synthetic, ignore_errors=True)
            synthetic_manifest(datasets[args.many], synthetic, args.synthetic)
        cases = [(op, n, datasets[n]) for op in ("open", "quick", "quick-own", "full", "hash") if op in ops
                 for n in (args.few, args.many)]
        if "open" in ops:
            cases.append(("open", args.synthetic, synthetic))
        if "convert" in ops:
            cases += [("convert", n, root / f"out-{n}") for n in (args.few, args.convert_many)]
        times: Dict[tuple, List[float]] = {}
        writing: Dict[tuple, List[float]] = {}
        for _ in range(args.repeat):
            for op, shards, dst in cases:
                for name, tree in trees.items():
                    per_shard = -(-args.rows // shards)
                    total, written = timed(tree, op, src, dst, args.format, per_shard, args.workers)
                    times.setdefault((name, op, shards), []).append(total)
                    writing.setdefault((name, op, shards), []).append(total - written)
        print(f"{args.format}, {args.rows} rows, medians of {args.repeat} (seconds, one child process each, "
              f"--workers {args.workers})")
        names = list(trees)
        print(f"{'operation':10} {'shards':>8} " + " ".join(f"{n:>10}" for n in names)
              + ("      ratio" if len(names) == 2 else ""))
        med: Dict[tuple, float] = {key: statistics.median(value) for key, value in times.items()}
        for op, shards, _ in cases:
            row = [med[(name, op, shards)] for name in names]
            ratio = f"  {row[1] / row[0]:8.3f}x" if len(row) == 2 else ""
            print(f"{op:10} {shards:>8} " + " ".join(f"{value:10.3f}" for value in row) + ratio)
        if "convert" in ops:
            rest = {key: statistics.median(value) for key, value in writing.items()}
            extra = args.convert_many - args.few
            for name in names:
                whole = (med[(name, "convert", args.convert_many)] - med[(name, "convert", args.few)]) / extra
                fixed = (rest[(name, "convert", args.convert_many)] - rest[(name, "convert", args.few)]) / extra
                print(f"convert cost per extra shard ({name}): {whole * 1000:.2f} ms, of which writing the shard "
                      f"(write_shard_file) {(whole - fixed) * 1000:.2f} ms and fixed cost (commit, done record, "
                      f"manifest entry, the rest) {fixed * 1000:.2f} ms")


if __name__ == "__main__":
    main()
