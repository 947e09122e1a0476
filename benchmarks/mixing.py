"""MixedDataset's read rate against one of its sources read alone, and each source's observed share.

Three datasets are mixed with weights 0.5 / 0.3 / 0.2 over an epoch of --epoch samples (100,000);
the baseline reads the first source alone for as many samples (RandomSampler with replacement, one
DataLoader iteration, like the mixture's). Both go through DataLoader(batch_size=256,
num_workers=2) with torch's default collate; contenders interleaved, medians of --repeat runs.
Wall-clock rate, and CPU time per sample over the main process and its workers (steadier on a
shared machine). The shares are counted from the source tensor of every batch.

--kind images (default): 64x64 JPEGs (passthrough) decoded to tensors, the usual training read.
--kind table: 16 float32 features a row, about the cheapest sample there is, where what a mixture
adds (its epoch order, the tagging, three datasets read instead of one) shows most.

    PYTHONPATH=. python benchmarks/mixing.py --kind images --repeat 3
    PYTHONPATH=. python benchmarks/mixing.py --kind table --repeat 5 --sharing-strategy file_system
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from typing import Dict, List, Tuple

import numpy as np
import torch.utils.data

import shardkit
from shardkit.samples import make_image_tree

WEIGHTS = (0.5, 0.3, 0.2)
SIZES = {"images": "10000,4000,2000", "table": "100000,40000,20000"}


def write_table(path: str, rows: int, seed: int, features: int = 16) -> None:
    """A CSV of `rows` rows: `features` float columns and a label column of 10 classes."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    rng = np.random.default_rng(seed)
    columns = {f"f{number}": rng.normal(size=rows).astype(np.float32) for number in range(features)}
    columns["label"] = np.array([f"c{value}" for value in rng.integers(0, 10, size=rows)])
    pacsv.write_csv(pa.table(columns), path)


def make_sources(work: str, kind: str, sizes: Tuple[int, ...]) -> List[str]:
    """One converted dataset per size (kept between runs)."""
    paths = []
    for number, count in enumerate(sizes):
        dst = os.path.join(work, f"{kind}-{number}-{count}-v2")
        if not os.path.exists(os.path.join(dst, "manifest.json")):
            shutil.rmtree(dst, ignore_errors=True)
            src = os.path.join(work, f"{kind}-{number}-src")
            shutil.rmtree(src, ignore_errors=True)
            if kind == "images":
                # one seed for all: the same kinds of pictures (JPEG/PNG, grey, alpha) in the same
                # shares, so that a sample costs the same to decode whichever source serves it
                make_image_tree(src, num_images=count, seed=0, sizes=(64, 64))
                shardkit.convert(src, dst, samples_per_shard=1024, quiet=True)
                shutil.rmtree(src)
            else:
                write_table(src + ".csv", count, seed=number)
                shardkit.convert(src + ".csv", dst, label_column="label", samples_per_shard=4096, quiet=True)
        paths.append(dst)
    return paths


def cpu_seconds() -> float:
    """CPU time of this process and of its children that ended (the DataLoader's workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


Measured = Tuple[float, float, int, np.ndarray]


def read_epoch(dataset: torch.utils.data.Dataset, sampler: torch.utils.data.Sampler) -> Measured:
    """Wall seconds, CPU seconds, samples read, and samples per source (all in source 0 when unmixed)."""
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, sampler=sampler, num_workers=2)
    started, cpu, samples = time.perf_counter(), cpu_seconds(), 0
    per_source = np.zeros(len(WEIGHTS), dtype=np.int64)
    for batch in loader:
        samples += len(batch[0])
        if len(batch) == 3:
            per_source += np.bincount(batch[2].numpy(), minlength=len(WEIGHTS))
        else:
            per_source[0] += len(batch[0])
    wall = time.perf_counter() - started
    del loader                          # its workers end, so their CPU time is counted
    return wall, cpu_seconds() - cpu, samples, per_source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(SIZES), default="images")
    parser.add_argument("--sizes", default=None, help="samples of each of the three sources")
    parser.add_argument("--epoch", type=int, default=100_000, help="samples per epoch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-mixing"))
    parser.add_argument("--sharing-strategy", choices=("file_descriptor", "file_system"), default=None,
                        help="torch.multiprocessing's way of passing a batch's tensors from the workers "
                             "(default: torch's, file_descriptor on Linux)")
    args = parser.parse_args()
    if args.sharing_strategy:
        torch.multiprocessing.set_sharing_strategy(args.sharing_strategy)
    sizes = tuple(int(size) for size in (args.sizes or SIZES[args.kind]).split(","))
    os.makedirs(args.work, exist_ok=True)
    paths = make_sources(args.work, args.kind, sizes)
    decode = "tensor" if args.kind == "images" else "pil"
    sources = [shardkit.open_dataset(path, decode=decode) for path in paths]
    alone = shardkit.open_dataset(paths[0], decode=decode)
    rates: Dict[str, List[Tuple[float, float]]] = {"source 0 alone": [], "mixed": []}
    shares = np.zeros(len(WEIGHTS))
    for repeat in range(args.repeat):
        generator = torch.Generator().manual_seed(repeat)
        sampler = torch.utils.data.RandomSampler(alone, replacement=True, num_samples=args.epoch, generator=generator)
        wall, cpu, samples, _ = read_epoch(alone, sampler)
        rates["source 0 alone"].append((samples / wall, cpu / samples * 1e6))
        mixed = shardkit.MixedDataset(sources, weights=WEIGHTS, seed=repeat, num_samples=args.epoch,
                                      num_replicas=1, rank=0)
        wall, cpu, samples, per_source = read_epoch(mixed, mixed.sampler)
        rates["mixed"].append((samples / wall, cpu / samples * 1e6))
        shares = per_source / samples
    base_rate = statistics.median(rate for rate, _ in rates["source 0 alone"])
    base_cpu = statistics.median(cpu for _, cpu in rates["source 0 alone"])
    print(f"{args.kind}: sources of {', '.join(f'{size:,}' for size in sizes)} samples; epoch {args.epoch:,} samples; "
          f"DataLoader(batch_size=256, num_workers=2); median of {args.repeat}; sharing strategy "
          f"{torch.multiprocessing.get_sharing_strategy()}")
    print("| reader | samples/s | runs | rate / alone | CPU us a sample | alone's CPU / this |")
    print("|---|---|---|---|---|---|")
    for name, values in rates.items():
        rate, cpu = statistics.median(r for r, _ in values), statistics.median(c for _, c in values)
        runs = ", ".join(f"{r:,.0f}" for r, _ in values)
        print(f"| {name} | {rate:,.0f} | {runs} | {rate / base_rate:.3f}x | {cpu:.1f} | {base_cpu / cpu:.3f}x |")
    print("| source | weight | observed share (last epoch) | difference |")
    print("|---|---|---|---|")
    for number, (weight, share) in enumerate(zip(WEIGHTS, shares)):
        print(f"| {number} | {weight:.3f} | {share:.5f} | {100 * (share - weight):+.3f} points |")


if __name__ == "__main__":
    main()
