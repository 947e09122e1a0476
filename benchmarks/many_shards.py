"""Many shards against few: the same samples cut into --few and --many shards, every format, one run.

For each format, the same CSV rows are converted into --few shards and into --many shards, then:

  convert     seconds per shard beyond the --few conversion: (t_many - t_few) / (many - few)
  open        open_dataset(DST) wall time (median of --repeats)
  quick       verify(DST, mode="quick") wall time (median of --repeats)
  uniform     ds[i] per second in one process, uniform random order, after one read of every shard
              (decode=None: the stored row, no copy)
  decoded     the same with the default decode (each row a float32 tensor), as a training loop reads,
              in a dataset opened after the first was closed (one process's maps hold the row arena
              of about 15,800 shards: docs/formats.md)
  sampler     the same in ShardAwareSampler order
  first       samples per second through DataLoader(batch_size=256, num_workers=2, RandomSampler),
              decode=None, workers not persistent (PyTorch's default), first epoch, after
              ds.open_shards() in the parent (docs/training.md): its time includes that call, which
              locates every shard's rows in the parent's row arena
  loader      the same, last of --epochs epochs: each epoch's fresh workers inherit what
              open_shards() placed
  unplaced    the same as loader without ds.open_shards(): the workers open every shard they read
              again each epoch, measured in the same run
  persistent  the same as loader with persistent_workers=True: the last epoch's workers opened
              their shards in an earlier epoch
  private     the largest worker's private memory (Private_Clean + Private_Dirty of
              /proc/self/smaps_rollup, MiB, every 32nd batch) over one more, untimed epoch of
              the loader

Rates are medians of --repeats, few and many interleaved within each repeat; the ratio many/few
is the median of the per-repeat ratios, so machine noise hits both alike.

    PYTHONPATH=. python benchmarks/many_shards.py --rows 100000 --few 100 --many 10000

Results and the machine they came from: docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List

import numpy as np
import torch.utils.data

import shardkit
from shardkit.formats import format_names


def write_csv(path: str, rows: int) -> None:
    """rows of four float columns and a label of 10 classes."""
    rng = np.random.default_rng(0)
    values = rng.random((rows, 4)).round(6)
    labels = rng.integers(0, 10, rows)
    with open(path, "w") as handle:
        handle.write("a,b,c,d,label\n")
        for row, label in zip(values.tolist(), labels.tolist()):
            handle.write(f"{row[0]},{row[1]},{row[2]},{row[3]},c{label}\n")


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def read_rate(ds: Any, order: List[int]) -> float:
    """ds[i] per second over order, after one read of every shard (each process opens it once)."""
    for start in ds.shard_starts[:-1].tolist():
        ds[start]
    started = time.perf_counter()
    for index in order:
        ds[index]
    return len(order) / (time.perf_counter() - started)


def _count_in_worker(batch: list) -> int:
    """collate_fn, run in the worker: the samples of the batch (nothing crosses back but that)."""
    return len(batch)


_batches_here = [0]


def _private_in_worker(batch: list) -> float:
    """collate_fn, run in the worker: its private memory in MiB, read every 32nd batch (reading
    smaps_rollup walks every map of the process: milliseconds at 10,000 shards), else 0."""
    _batches_here[0] += 1
    if _batches_here[0] % 32 != 1:
        return 0.0
    with open("/proc/self/smaps_rollup") as handle:
        kinds = ("Private_Clean", "Private_Dirty")
        return sum(int(line.split()[1]) for line in handle if line.startswith(kinds)) / 1024


def loader_rate(dst: str, epochs: int, persistent: bool = False, placed: bool = True) -> "tuple[float, float, float]":
    """(samples/s of the first and of the last epoch, the largest worker private memory in MiB over
    one more epoch). Workers not persistent (PyTorch's default): each epoch starts fresh ones, which
    open again every shard they touch but those the parent opened (ds.open_shards(), when placed)."""
    ds = shardkit.open_dataset(dst, decode=None)
    started = time.perf_counter()
    if placed:
        ds.open_shards()
    preparing = time.perf_counter() - started

    def loader(collate: Callable[[list], Any]) -> Any:
        return torch.utils.data.DataLoader(
            ds, batch_size=256, num_workers=2, persistent_workers=persistent, collate_fn=collate,
            sampler=torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(0)))
    timed_loader, rates = loader(_count_in_worker), []
    for epoch in range(epochs):
        started = time.perf_counter()
        rates.append(sum(timed_loader) / (time.perf_counter() - started + (preparing if epoch == 0 else 0.0)))
    del timed_loader
    private = 0.0 if persistent else max(loader(_private_in_worker))
    ds.close()
    return rates[0], rates[-1], private


def measure(fmt: str, csv: str, work: str, rows: int, few: int, many: int, repeats: int,
            reads: int, epochs: int, quick: bool = True) -> Dict[str, Any]:
    dsts = {count: os.path.join(work, f"{fmt}-{count}") for count in (few, many)}
    convert_s = {count: timed(lambda: shardkit.convert(csv, dsts[count], format=fmt, label_column="label",
                                                       samples_per_shard=-(-rows // count), quiet=True))
                 for count in (few, many)}
    results: Dict[str, Any] = {"convert_ms_per_shard": 1000 * (convert_s[many] - convert_s[few]) / (many - few)}
    names = ("open", "quick", "uniform", "decoded", "sampler", "first", "loader", "unplaced", "persistent",
             "private")
    samples: Dict[str, Dict[int, List[float]]] = {name: {few: [], many: []} for name in names}
    rng = np.random.default_rng(0)
    for _ in range(repeats):
        for count in (few, many):
            dst = dsts[count]
            samples["open"][count].append(timed(lambda: shardkit.open_dataset(dst, decode=None)))
            if quick:
                samples["quick"][count].append(timed(lambda: shardkit.verify(dst, mode="quick")))
            ds = shardkit.open_dataset(dst, decode=None)
            order = rng.integers(0, len(ds), reads).tolist()
            samples["uniform"][count].append(read_rate(ds, order))
            sampler = shardkit.ShardAwareSampler(ds, seed=0)
            samples["sampler"][count].append(read_rate(ds, list(sampler)[:reads]))
            ds.close()      # before the next: the process's maps hold one row arena of 10,000 shards, not two
            with shardkit.open_dataset(dst) as decoded:
                samples["decoded"][count].append(read_rate(decoded, order))
            first, last, private = loader_rate(dst, epochs)
            samples["first"][count].append(first)
            samples["loader"][count].append(last)
            samples["private"][count].append(private)
            samples["unplaced"][count].append(loader_rate(dst, epochs, placed=False)[1])
            samples["persistent"][count].append(loader_rate(dst, max(2, epochs), persistent=True)[1])
    for name, by_count in samples.items():
        if not by_count[few]:
            by_count = {few: [float("nan")], many: [float("nan")]}
        results[name] = {count: statistics.median(values) for count, values in by_count.items()}
        results[name]["ratio"] = statistics.median(m / f for f, m in zip(by_count[few], by_count[many]))
    return results


def _shown(value: float, spec: str, unit: str = "") -> str:
    """value formatted by spec with its unit, or "-" when it was not measured (NaN: --no-quick)."""
    return "-" if math.isnan(value) else f"{value:{spec}}{unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--few", type=int, default=100)
    parser.add_argument("--many", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reads", type=int, default=30_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--formats", nargs="*", default=format_names())
    parser.add_argument("--no-quick", action="store_true", help="skip verify --quick (benchmarks/many_shards_ops.py "
                        "measures it)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="many_shards_")
    try:
        csv = os.path.join(work, "rows.csv")
        write_csv(csv, args.rows)
        print(f"{args.rows} rows, {args.few} vs {args.many} shards, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}")
        print("| format | shards | uniform /s | decoded /s | sampler /s | loader, first epoch /s | loader /s "
              "| loader, unplaced /s | persistent loader /s | worker private MiB | open_dataset s | verify --quick s "
              "| convert ms/shard |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for fmt in args.formats:
            res = measure(fmt, csv, work, args.rows, args.few, args.many, args.repeats, args.reads, args.epochs,
                          not args.no_quick)
            for count in (args.few, args.many):
                convert = f"{res['convert_ms_per_shard']:.2f}" if count == args.many else ""
                print(f"| {fmt} | {count:,} | {res['uniform'][count]:,.0f} | {res['decoded'][count]:,.0f} "
                      f"| {res['sampler'][count]:,.0f} | {res['first'][count]:,.0f} | {res['loader'][count]:,.0f} "
                      f"| {res['unplaced'][count]:,.0f} "
                      f"| {res['persistent'][count]:,.0f} "
                      f"| {res['private'][count]:.0f} "
                      f"| {res['open'][count]:.3f} "
                      f"| {_shown(res['quick'][count], '.3f')} | {convert} |")
            print(f"| {fmt} | ratio | {res['uniform']['ratio']:.2f}x | {res['decoded']['ratio']:.2f}x "
                  f"| {res['sampler']['ratio']:.2f}x | {res['first']['ratio']:.2f}x | {res['loader']['ratio']:.2f}x "
                  f"| {res['unplaced']['ratio']:.2f}x "
                  f"| {res['persistent']['ratio']:.2f}x | "
                  f"| {res['open']['ratio']:.1f}x | {_shown(res['quick']['ratio'], '.1f', 'x')} | |",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
