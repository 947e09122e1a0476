"""CSV conversion speed against baselines measured in the same run.

Generates a numeric-heavy and a string-heavy CSV, then times, for each, several interleaved runs of:
  csv module  — Python's csv.reader + float() / dict codes + numpy arrays, all in memory;
  loadtxt     — numpy.loadtxt (numpy's C parser) into memory (dtype=str for the string file);
  shardkit    — shardkit.convert (scan + parse + encode + write shards + fsync + sha256), one process.
Then the string-heavy rows split into a tree of --tree-files files, converted with --workers 1 and
with --tree-workers (the scan parses files in worker processes), against the csv module on the
single file. Prints medians: rows/s, MB/s of CSV, and shardkit's time relative to each.

    python benchmarks/csv_convert.py [--rows 200000] [--repeat 3] [--format hdf5] [--workdir DIR]
                                     [--tree-files 4] [--tree-workers 2]
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import shardkit  # noqa: E402

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


def csv_module_numeric(path: str) -> int:
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        next(reader)
        rows = [[float(value) for value in row] for row in reader]
    data = np.asarray(rows, dtype=np.float32)
    features, labels = data[:, :-1], data[:, -1].astype(np.int64)
    return len(features) + 0 * len(labels)


def csv_module_strings(path: str) -> int:
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        next(reader)
        rows = list(reader)
    table = list(zip(*rows))
    features = np.empty((len(rows), len(table) - 1), dtype=np.float32)
    for index, column in enumerate(table[:-1]):
        try:
            features[:, index] = [float(value) for value in column]
        except ValueError:
            lookup = {name: code for code, name in enumerate(sorted(set(column)))}
            features[:, index] = [lookup[value] for value in column]
    classes = {name: code for code, name in enumerate(sorted(set(table[-1])))}
    labels = np.array([classes[value] for value in table[-1]], dtype=np.int64)
    return len(labels)


def loadtxt_numeric(path: str) -> int:
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)
    return len(data)


def loadtxt_strings(path: str) -> int:
    text = np.loadtxt(path, delimiter=",", skiprows=1, dtype=str, quotechar='"', comments=None)
    features = np.empty((len(text), text.shape[1] - 1), dtype=np.float32)
    features[:, :3] = text[:, :3].astype(np.float32)
    for index in range(3, text.shape[1] - 1):
        features[:, index] = np.unique(text[:, index], return_inverse=True)[1]
    labels = np.unique(text[:, -1], return_inverse=True)[1]
    return len(labels)


def shardkit_convert(fmt: str, workdir: str, workers: int = 1) -> Callable[[str], int]:
    def run(path: str) -> int:
        dst = os.path.join(workdir, "out")
        shutil.rmtree(dst, ignore_errors=True)
        report = shardkit.convert(path, dst, format=fmt, label_column="label", workers=workers, quiet=True)
        return report.num_samples
    return run


def split_into_tree(path: str, root: str, files: int) -> None:
    """The rows of one CSV file, in order, as `files` files (each with the header) under root."""
    with open(path, newline="") as handle:
        header, *lines = handle.read().splitlines(keepends=True)
    # whole records only: a quoted field here never spans lines, so lines are records
    step = -(-len(lines) // files)
    os.makedirs(root, exist_ok=True)
    for number in range(files):
        with open(os.path.join(root, f"part-{number:03d}.csv"), "w", newline="") as handle:
            handle.write(header)
            handle.writelines(lines[number * step:(number + 1) * step])


def measure(path: str, methods: Dict[str, Callable[[str], int]], repeat: int) -> Dict[str, List[float]]:
    times: Dict[str, List[float]] = {name: [] for name in methods}
    for _ in range(repeat):
        for name, method in methods.items():           # interleaved, so drift hits every method alike
            started = time.perf_counter()
            method(path)
            times[name].append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--format", default="hdf5")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--tree-files", type=int, default=4)
    parser.add_argument("--tree-workers", type=int, default=2)
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="shardkit-csv-bench-")
    os.makedirs(workdir, exist_ok=True)
    files = {"numeric": os.path.join(workdir, "numeric.csv"), "strings": os.path.join(workdir, "strings.csv"),
             "strings tree": os.path.join(workdir, "tree")}
    make_numeric(files["numeric"], args.rows)
    make_strings(files["strings"], args.rows)
    shutil.rmtree(files["strings tree"], ignore_errors=True)
    split_into_tree(files["strings"], files["strings tree"], args.tree_files)
    convert = shardkit_convert(args.format, workdir)
    suites = {
        "numeric": {"csv module": csv_module_numeric, "numpy.loadtxt": loadtxt_numeric, "shardkit": convert},
        "strings": {"csv module": csv_module_strings, "numpy.loadtxt": loadtxt_strings, "shardkit": convert},
        "strings tree": {"csv module (one file)": lambda _: csv_module_strings(files["strings"]),
                         "shardkit --workers 1": convert,
                         "shardkit": shardkit_convert(args.format, workdir, args.tree_workers)},
    }
    print(f"rows per file: {args.rows}, repeats: {args.repeat} (median), format: {args.format}, "
          f"numpy {np.__version__}, python {sys.version.split()[0]}; tree: {args.tree_files} files, "
          f"shardkit = --workers {args.tree_workers} there")
    print()
    print("| file | size | method | median s | rows/s | MB/s | shardkit time / this |")
    print("|---|---|---|---|---|---|---|")
    for kind, path in files.items():
        paths = [os.path.join(path, name) for name in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
        size = sum(os.path.getsize(name) for name in paths)
        for name in paths:                              # warm the page cache for every method alike
            with open(name, "rb") as handle:
                while handle.read(1 << 24):
                    pass
        times = measure(path, suites[kind], args.repeat)
        medians = {name: statistics.median(values) for name, values in times.items()}
        for name, seconds in medians.items():
            ratio = medians["shardkit"] / seconds
            print(f"| {kind} | {size / 1e6:.0f} MB | {name} | {seconds:.2f} | {args.rows / seconds:,.0f} | "
                  f"{size / 1e6 / seconds:.1f} | {ratio:.2f} |")
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
