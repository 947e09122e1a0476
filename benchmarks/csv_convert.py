"""Table conversion speed against Apache Arrow's own readers, measured in the same run.

Generates a numeric-heavy and a string-heavy CSV (and the same tables as Parquet), then times,
interleaved, for each:
  pyarrow.csv 1 thread    — pyarrow.csv.read_csv(use_threads=False): parse and infer types, in memory;
  pyarrow.csv all threads — the same on every core;
  shardkit                — shardkit.convert (scan + parse + encode + spill + write shards + fsync +
                            sha256), --workers 1;
  shardkit --workers 2    — the same file split into byte ranges parsed by 2 processes;
  pyarrow.parquet 1 thread / shardkit (parquet) — for the Parquet files;
  integrity floor         — Arrow's 1-thread read, then only what any conversion keeping
                            SPEC.md's guarantees must do to the rows besides: numbers as float32 rows,
                            text columns as int32 dictionary codes, a CRC32 per row (row_crc.py,
                            shardkit's fastest), a sha256 of the bytes, a write and an fsync. No
                            type inference, keys, labels, shard cuts or manifest: Arrow's time over
                            this one is the most "Arrow / shardkit" any implementation can reach.
Prints medians of wall and CPU seconds (this process's CPU plus that of the worker processes it
waited for; on a shared machine CPU time is the steadier of the two), rows/s, MB/s of the input,
and each method's wall and CPU time relative to shardkit's. With --memory, also the peak RSS of a
child process converting the string-heavy CSV in one process (--workers 1), with default shards
and with --shard-size 16MB, at each row count of --memory-rows (default: --rows). With --baseline
SRC_TREE (another checkout of shardkit, e.g. `git archive main | tar -x -C /tmp/base`), two more
methods, interleaved with the others: "child: this tree" and "child: baseline", each a fresh
process that converts a small file of the same kind first (imports, caches) and then times the
conversion of the file itself — the before/after ratio of a change, measured in one run. With
--scaling, --workers 1 against 2 on the numeric CSV, of --scaling-rows rows (scaling() explains its columns).

    python benchmarks/csv_convert.py [--rows 200000] [--repeat 3] [--format hdf5] [--workdir DIR] [--memory]
                                     [--memory-rows 300000,900000] [--baseline SRC_TREE] [--scaling]
                                     [--scaling-rows 2000000]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import shardkit  # noqa: E402
from shardkit.codecs.row_crc import row_crc32  # noqa: E402

NUMERIC_COLUMNS = 32
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango"]


def make_numeric(path: str, rows: int, seed: int = 0) -> None:
    """32 float columns (7 significant digits, as float32 data is usually written) + an int label."""
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as handle:
        handle.write(",".join(f"f{i}" for i in range(NUMERIC_COLUMNS)) + ",label\n")
        for start in range(0, rows, 50_000):
            count = min(50_000, rows - start)
            block = np.column_stack([rng.standard_normal((count, NUMERIC_COLUMNS)) * 100,
                                     rng.integers(0, 10, count)])
            np.savetxt(handle, block, delimiter=",", fmt=["%.7g"] * NUMERIC_COLUMNS + ["%d"])


def make_strings(path: str, rows: int, seed: int = 1) -> None:
    """3 numbers, 8 category columns (some values hold commas, so they are quoted) + a class label."""
    rng = np.random.default_rng(seed)
    vocab = [f"{a} {b}" if (i % 7) else f"{a}, {b}" for i, (a, b) in
             enumerate((a, b) for a in WORDS for b in WORDS)]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["x0", "x1", "x2"] + [f"c{i}" for i in range(8)] + ["label"])
        for start in range(0, rows, 50_000):
            count = min(50_000, rows - start)
            numbers = rng.standard_normal((count, 3))
            codes = rng.integers(0, len(vocab), (count, 8))
            labels = rng.integers(0, 5, count)
            for row in range(count):
                writer.writerow([f"{value:.6g}" for value in numbers[row]] + [vocab[c] for c in codes[row]]
                                + [WORDS[labels[row]]])


def arrow_csv(threads: bool) -> Callable[[str], int]:
    def run(path: str) -> int:
        return pcsv.read_csv(path, read_options=pcsv.ReadOptions(use_threads=threads)).num_rows
    return run


def arrow_parquet(path: str) -> int:
    return pq.read_table(path, use_threads=False).num_rows


def integrity_floor(read: Callable[[str], "pa.Table"], workdir: str) -> Callable[[str], int]:
    """Arrow's read plus the least any conversion that keeps a CRC32 per sample and a sha256 per
    file must do to the rows (see the module docstring): a floor under shardkit's time."""
    def run(path: str) -> int:
        table = read(path)
        columns = []
        for column in table.columns:
            if pa.types.is_floating(column.type) or pa.types.is_integer(column.type):
                columns.append(column.to_numpy().astype(np.float32).view(np.uint8).reshape(-1, 4))
            else:
                codes = pc.dictionary_encode(column).combine_chunks().indices
                columns.append(codes.to_numpy(zero_copy_only=False).astype(np.int32).view(np.uint8).reshape(-1, 4))
        rows = np.ascontiguousarray(np.concatenate(columns, axis=1))
        crcs = row_crc32(rows)
        digest = hashlib.sha256(rows)
        digest.update(crcs)
        out = os.path.join(workdir, "floor.bin")
        with open(out, "wb") as handle:
            handle.write(rows.data)
            handle.write(crcs.data)
            handle.flush()
            os.fsync(handle.fileno())
        os.unlink(out)
        return table.num_rows
    return run


def shardkit_convert(fmt: str, workdir: str, workers: int = 1) -> Callable[[str], int]:
    def run(path: str) -> int:
        dst = os.path.join(workdir, "out")
        shutil.rmtree(dst, ignore_errors=True)
        report = shardkit.convert(path, dst, format=fmt, label_column="label", workers=workers, quiet=True)
        return report.num_samples
    return run


_TIMED_CHILD = """
import shutil, sys, time
sys.path.insert(0, sys.argv[1])
import shardkit
def run(src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shardkit.convert(src, dst, format=sys.argv[5], label_column="label", workers=1, quiet=True)
run(sys.argv[2], sys.argv[4])
started, cpu = time.perf_counter(), time.process_time()
run(sys.argv[3], sys.argv[4])
print(time.perf_counter() - started, time.process_time() - cpu)
"""


def child_convert(tree: str, fmt: str, workdir: str, warmups: Dict[str, str]) -> Callable[[str], Tuple[float, float]]:
    """(wall, CPU) seconds a fresh process running the shardkit of `tree` takes to convert a file (after
    warming up on a small file of the same kind)."""
    def run(path: str) -> Tuple[float, float]:
        done = subprocess.run([sys.executable, "-c", _TIMED_CHILD, tree, warmups[path], path,
                               os.path.join(workdir, "child-out"), fmt], check=True, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": tree})
        wall, cpu = done.stdout.strip().splitlines()[-1].split()
        return float(wall), float(cpu)
    return run


def _cpu_seconds() -> float:
    """CPU time of this process and of the child processes it has waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def measure(path: str, methods: Dict[str, Callable[[str], object]],
            repeat: int) -> Dict[str, List[Tuple[float, float]]]:
    """(wall, CPU) seconds of each method per repeat, interleaved, each repeat starting one method
    later (so no method always runs right after the same other one); a method that returns a tuple
    timed itself."""
    times: Dict[str, List[Tuple[float, float]]] = {name: [] for name in methods}
    names = list(methods)
    for turn in range(repeat):
        for name in names[turn % len(names):] + names[:turn % len(names)]:   # drift hits every method alike
            method = methods[name]
            started, cpu = time.perf_counter(), _cpu_seconds()
            result = method(path)
            spent = (time.perf_counter() - started, _cpu_seconds() - cpu)
            times[name].append(result if isinstance(result, tuple) else spent)
    return times


_CHILD = """
import json, sys
import shardkit
def high_water_kib():
    # VmHWM: this process's own peak; ru_maxrss would start at the (large) parent's, kept across exec
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
before = high_water_kib()
shardkit.convert(sys.argv[1], sys.argv[2], label_column="label", quiet=True, workers=1, **json.loads(sys.argv[3]))
print(json.dumps({"before_kib": before, "peak_kib": high_water_kib()}))
"""


def peak_rss(path: str, workdir: str, options: Dict[str, str]) -> Dict[str, int]:
    """Peak RSS (KiB, Linux VmHWM) of a child process converting `path` in one process, and after its imports."""
    dst = os.path.join(workdir, "memory-out")
    shutil.rmtree(dst, ignore_errors=True)
    done = subprocess.run([sys.executable, "-c", _CHILD, path, dst, json.dumps(options)], check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_table(rows: List[int], workdir: str) -> None:
    """Peak RSS converting the string-heavy CSV at each row count, default shards and 16 MB shards."""
    print()
    print("| strings.csv rows | size | shards | peak RSS | after `import shardkit` |")
    print("|---|---|---|---|---|")
    for count in rows:
        path = os.path.join(workdir, f"memory-{count}.csv")
        make_strings(path, count)
        for label, options in (("default (256MB)", {}), ("--shard-size 16MB", {"shard_size": "16MB"})):
            facts = peak_rss(path, workdir, options)
            print(f"| {count:,} | {os.path.getsize(path) / 1e6:.0f} MB | {label} | "
                  f"{facts['peak_kib'] / 1024:.0f} MiB | {facts['before_kib'] / 1024:.0f} MiB |")
        os.remove(path)


_SCALING_CHILD = """
import json, resource, shutil, sys, time
import shardkit
from shardkit.sources.tabular import source
def cpu():
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime
marks = {}
opened = source.TabularSource.open.__func__
def timed_open(cls, *args, **kwargs):
    found = opened(cls, *args, **kwargs)
    marks["scan"] = (time.perf_counter(), *cpu())
    return found
source.TabularSource.open = classmethod(timed_open)
src, dst, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.rmtree(dst, ignore_errors=True)
start = (time.perf_counter(), *cpu())
shardkit.convert(src, dst, label_column="label", workers=workers, quiet=True, **json.loads(sys.argv[4]))
end = (time.perf_counter(), *cpu())
scan = marks["scan"]
print(json.dumps({"wall": end[0] - start[0], "scan_wall": scan[0] - start[0],
                  "scan_self": scan[1] - start[1], "scan_children": scan[2] - start[2],
                  "write_self": end[1] - scan[1], "write_children": end[2] - scan[2]}))
"""


def scaling(path: str, workdir: str, repeat: int, options: Dict[str, str]) -> None:
    """--workers 1 against 2 on one file, in fresh processes (ABAB): wall seconds, and CPU seconds of
    the scan and of the shard writing, the process's own and its worker processes'. The 2-core
    estimate is what the CPU seconds take on two idle cores: the parent's own part, plus the
    workers' part split over min(2, workers) cores (the scan's two byte ranges run at once; a
    single shard is written by one process)."""
    runs: Dict[int, List[Dict[str, float]]] = {1: [], 2: []}
    for _ in range(repeat):
        for workers in (1, 2):
            done = subprocess.run([sys.executable, "-c", _SCALING_CHILD, path, os.path.join(workdir, "scaling-out"),
                                   str(workers), json.dumps(options)], check=True, capture_output=True, text=True)
            runs[workers].append(json.loads(done.stdout.strip().splitlines()[-1]))
    shards = len(json.loads(open(os.path.join(workdir, "scaling-out", "manifest.json")).read())["shards"])
    print(f"\n{os.path.basename(path)}, {os.path.getsize(path) / 1e6:.0f} MB, {shards} shard(s), options {options}, "
          f"medians of {repeat} ABAB runs, load average {os.getloadavg()[0]:.1f}:")
    print()
    print("| workers | wall s | scan: own CPU s | scan: workers' CPU s | write: own CPU s | write: workers' CPU s "
          "| CPU s in all | 2-core estimate s |")
    print("|---|---|---|---|---|---|---|---|")
    estimates = {}
    for workers, found in runs.items():
        median = {key: statistics.median(run[key] for run in found) for key in found[0]}
        total = median["scan_self"] + median["scan_children"] + median["write_self"] + median["write_children"]
        estimates[workers] = (median["scan_self"] + median["scan_children"] / min(2, workers) + median["write_self"]
                              + median["write_children"] / min(2, workers, shards))
        print(f"| {workers} | {median['wall']:.2f} | {median['scan_self']:.2f} | {median['scan_children']:.2f} | "
              f"{median['write_self']:.2f} | {median['write_children']:.2f} | {total:.2f} | {estimates[workers]:.2f} |")
    print(f"\n2-core estimate, 1 worker / 2 workers: {estimates[1] / estimates[2]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--format", default="hdf5")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--memory-rows", default=None, help="row counts for --memory, e.g. 300000,900000")
    parser.add_argument("--baseline", default=None, help="another shardkit source tree to compare with")
    parser.add_argument("--scaling", action="store_true",
                        help="also --workers 1 against 2 on the numeric CSV, with default and 16MB shards")
    parser.add_argument("--scaling-rows", type=int, default=None,
                        help="rows of the numeric CSV that --scaling converts (default: --rows)")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="shardkit-table-bench-")
    os.makedirs(workdir, exist_ok=True)
    files = {"numeric": os.path.join(workdir, "numeric.csv"), "strings": os.path.join(workdir, "strings.csv")}
    make_numeric(files["numeric"], args.rows)
    make_strings(files["strings"], args.rows)
    for kind in ("numeric", "strings"):
        files[f"{kind} parquet"] = os.path.join(workdir, f"{kind}.parquet")
        pq.write_table(pcsv.read_csv(files[kind]), files[f"{kind} parquet"])
    warmups: Dict[str, str] = {}
    for kind, make in (("numeric", make_numeric), ("strings", make_strings)):
        small = os.path.join(workdir, f"small-{kind}.csv")
        make(small, 2000)
        pq.write_table(pcsv.read_csv(small), small.replace(".csv", ".parquet"))
        warmups[files[kind]], warmups[files[f"{kind} parquet"]] = small, small.replace(".csv", ".parquet")
    convert = shardkit_convert(args.format, workdir)
    two = shardkit_convert(args.format, workdir, workers=2)
    text_suite: Dict[str, Callable[[str], object]] = {
        "pyarrow.csv 1 thread": arrow_csv(False), "pyarrow.csv all threads": arrow_csv(True),
        "integrity floor": integrity_floor(
            lambda path: pcsv.read_csv(path, read_options=pcsv.ReadOptions(use_threads=False)), workdir),
        "shardkit": convert, "shardkit --workers 2": two}
    parquet_suite: Dict[str, Callable[[str], object]] = {
        "pyarrow.parquet 1 thread": arrow_parquet,
        "integrity floor": integrity_floor(lambda path: pq.read_table(path, use_threads=False), workdir),
        "shardkit": convert}
    if args.baseline:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for suite in (text_suite, parquet_suite):
            suite["child: this tree"] = child_convert(here, args.format, workdir, warmups)
            suite["child: baseline"] = child_convert(os.path.abspath(args.baseline), args.format, workdir, warmups)
    print(f"rows per file: {args.rows}, repeats: {args.repeat} (median), format: {args.format}, "
          f"python {sys.version.split()[0]}, cpus {os.cpu_count()}, load average at start "
          f"{os.getloadavg()[0]:.1f}")
    print()
    print("| file | size | method | median s | CPU s | rows/s | MB/s | time / shardkit's | CPU / shardkit's |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, path in files.items():
        size = os.path.getsize(path)
        with open(path, "rb") as handle:               # warm the page cache for every method alike
            while handle.read(1 << 24):
                pass
        suite = parquet_suite if kind.endswith("parquet") else text_suite
        times = measure(path, suite, args.repeat)
        walls = {name: statistics.median(wall for wall, _ in values) for name, values in times.items()}
        cpus = {name: statistics.median(cpu for _, cpu in values) for name, values in times.items()}
        for name, seconds in walls.items():
            print(f"| {kind} | {size / 1e6:.0f} MB | {name} | {seconds:.2f} | {cpus[name]:.2f} | "
                  f"{args.rows / seconds:,.0f} | {size / 1e6 / seconds:.1f} | {seconds / walls['shardkit']:.2f} | "
                  f"{cpus[name] / cpus['shardkit']:.2f} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.scaling:
        large = files["numeric"]
        if args.scaling_rows:
            large = os.path.join(workdir, f"numeric-{args.scaling_rows}.csv")
            make_numeric(large, args.scaling_rows)
        for options in ({}, {"shard_size": "16MB"}):
            scaling(large, workdir, args.repeat, options)
    if args.memory:
        memory_table([int(count) for count in (args.memory_rows or str(args.rows)).split(",")], workdir)
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
