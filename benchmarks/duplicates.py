"""`shardkit duplicates` on 1,000,000 samples: its rate against hashing the same shard bytes, and
its peak memory.

The dataset: a Parquet table of --rows rows (--features float32 features, 256 by default: 1 KiB a
sample stored, and a label of 10 classes), with --dup-share of its rows copies of other rows,
converted to HDF5. Each
contender runs in a fresh process (imports excluded from its time; its peak RSS from wait4):
  * hash shard bytes, sha256 and BLAKE2b: every shard file read in 1 MiB blocks and hashed (the
    faster of the two is the baseline: what reading and hashing the same bytes costs);
  * duplicates: `shardkit.duplicates([DST])`, default memory bound;
  * duplicates, spilled: the same with memory_rows=2**16 (every hash table spills to disk);
  * worst case: DST and a copy of it (every sample a candidate, read and digested, and reported).
Medians of --repeat runs, interleaved. Rates are samples (of all datasets given) per second. Peak
RSS (wait4: the largest process of the run, workers included) counts the shard pages a process
mapped, which the kernel can drop; the anonymous memory the run added (RssAnon, sampled in the
main process) is what the bound is about.

    PYTHONPATH=. python benchmarks/duplicates.py --repeat 3
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import numpy as np

import shardkit

CHILD = r"""
import hashlib, json, os, sys, threading, time
import shardkit
mode, args = sys.argv[1], json.loads(sys.argv[2])
if not mode.startswith("hash-"):    # imports (torch, h5py, ...) are not timed; hashing needs none of them
    import shardkit.ops.duplicates, shardkit.read.dataset
    from shardkit.formats import format_names, get_format
    [get_format(name) for name in format_names()]
peak, running = [0], [True]
def anonymous():            # this process's private memory (RssAnon), sampled every 10 ms
    while running[0]:
        with open("/proc/self/status") as status:
            kib = [int(line.split()[1]) for line in status if line.startswith("RssAnon:")]
        peak[0] = max(peak[0], kib[0] if kib else 0)
        time.sleep(0.01)
watcher = threading.Thread(target=anonymous)
watcher.start()
time.sleep(0.05)
at_start = peak[0]
started = time.perf_counter()
if mode.startswith("hash-"):
    total = 0
    for dst in args["dsts"]:
        folder = os.path.join(dst, "shards")
        for name in sorted(os.listdir(folder)):
            digest = hashlib.new(mode[5:])
            with open(os.path.join(folder, name), "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
                    total += len(block)
    found = total
else:
    report = shardkit.duplicates(args["dsts"], memory_rows=args["memory_rows"], workers=args["workers"])
    found = report.duplicates
seconds = time.perf_counter() - started
running[0] = False
watcher.join()
print(json.dumps({"seconds": seconds, "found": found, "anon_mib": (peak[0] - at_start) / 1024}))
"""


def make_dataset(work: str, rows: int, features: int, dup_share: float) -> Tuple[str, int]:
    """The converted table (kept between runs) and how many of its rows are copies."""
    dst = os.path.join(work, f"table-{rows}-{features}-{dup_share}")
    copies = int(rows * dup_share)
    if not os.path.exists(os.path.join(dst, "manifest.json")):
        import pyarrow as pa
        import pyarrow.parquet as pq
        shutil.rmtree(dst, ignore_errors=True)
        rng = np.random.default_rng(0)
        values = rng.normal(size=(rows, features)).astype(np.float32)
        targets = rng.choice(rows, size=copies, replace=False)
        values[targets] = values[rng.integers(0, rows, size=copies)]
        table = pa.table({**{f"f{n}": values[:, n] for n in range(features)},
                          "label": np.array([f"c{v}" for v in rng.integers(0, 10, size=rows)])})
        source = os.path.join(work, f"table-{rows}-{features}.parquet")
        pq.write_table(table, source)
        del values, table
        shardkit.convert(source, dst, label_column="label", samples_per_shard=65536, quiet=True)
        os.unlink(source)
    return dst, copies


def run(mode: str, **args: object) -> Dict[str, float]:
    """One contender in a fresh process: its seconds, what it found, and its peak RSS (MiB)."""
    process = subprocess.Popen([sys.executable, "-c", CHILD, mode, json.dumps(args)], stdout=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert process.stdout is not None
    out = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    if status:
        raise SystemExit(f"{mode} failed with status {status}")
    return {**json.loads(out), "rss_mib": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--dup-share", type=float, default=0.01, help="share of rows that copy another row")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-duplicates"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    dst, copies = make_dataset(args.work, args.rows, args.features, args.dup_share)
    twin = dst + "-copy"
    if not os.path.exists(os.path.join(twin, "manifest.json")):
        shutil.copytree(dst, twin)
    contenders = {
        "hash shard bytes (sha256)": ("hash-sha256", {"dsts": [dst]}, 1),
        "hash shard bytes (blake2b)": ("hash-blake2b", {"dsts": [dst]}, 1),
        "duplicates": ("dups", {"dsts": [dst], "memory_rows": 1 << 22, "workers": args.workers}, 1),
        "duplicates, spilled (memory_rows=2**16)": ("dups", {"dsts": [dst], "memory_rows": 1 << 16,
                                                             "workers": args.workers}, 1),
        "hash both copies' shard bytes (blake2b)": ("hash-blake2b", {"dsts": [dst, twin]}, 2),
        "worst case: DST and its copy": ("dups", {"dsts": [dst, twin], "memory_rows": 1 << 22,
                                                  "workers": args.workers}, 2),
    }
    results: Dict[str, List[Dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(args.repeat):
        for name, (mode, options, _) in contenders.items():
            results[name].append(run(mode, **options))
    samples = shardkit.open_dataset(dst).__len__()
    shard_bytes = sum(entry.size for entry in shardkit.open_dataset(dst).manifest.shards)
    print(f"{samples:,} samples ({copies:,} copies of other rows), {shard_bytes / 1e6:.1f} MB of shards; "
          f"workers={args.workers}; median of {args.repeat} runs, each in a fresh process")
    print("| contender | seconds | samples/s | / hashing the same bytes | peak RSS (MiB) | anonymous memory added "
          "(MiB) | found |")
    print("|---|---|---|---|---|---|---|")
    base_one = min(statistics.median(r["seconds"] for r in results[name]) for name in list(contenders)[:2])
    base_two = statistics.median(r["seconds"] for r in results["hash both copies' shard bytes (blake2b)"])
    for name, (mode, _, datasets) in contenders.items():
        seconds = statistics.median(r["seconds"] for r in results[name])
        base = base_one if datasets == 1 else base_two
        print(f"| {name} | {seconds:.3f} | {datasets * samples / seconds:,.0f} | {base / seconds:.2f}x | "
              f"{max(r['rss_mib'] for r in results[name]):.0f} | {max(r['anon_mib'] for r in results[name]):.0f} | "
              f"{results[name][-1]['found']:,.0f}{' bytes' if mode.startswith('hash') else ' duplicates'} |")


if __name__ == "__main__":
    main()
