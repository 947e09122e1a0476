"""Image modes benchmark: bytes on disk, conversion speed and random-access read speed per mode.

On one generated ImageNet-like tree (JPEGs of about 500x375), for each format and each image
mode / codec:
  * bytes on disk of the converted dataset,
  * conversion samples/s (shardkit.convert, --workers as given),
  * random-access read samples/s through DataLoader(batch_size, num_workers=2, uniformly random
    order), every sample decoded to a 3x224x224 uint8 tensor (encoded modes: decode, resize the
    shorter side to 224 with bilinear, center crop; raw 224x224: no decode at all),
and, in the same run, the widely copied baseline: one HDF5 file holding an (N, 3, 224, 224)
uint8 dataset chunked by 1000 samples with gzip, reopened in every __getitem__.

Read speeds are medians of --runs epochs after a short warm-up; the tree and datasets sit in
the page cache, so this measures CPU cost per sample, not the disk. Run:

    PYTHONPATH=. python benchmarks/image_modes.py                 # 2000 images, hdf5
    PYTHONPATH=. python benchmarks/image_modes.py --formats all --json results.json
    PYTHONPATH=. python benchmarks/image_modes.py --images 300 --runs 2     # a quick look
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

import h5py
import numpy as np
import torch
import torch.utils.data
from PIL import Image

import shardkit
from shardkit.formats import format_names
from shardkit.samples import make_photo_tree

SIDE = 224
#: (label, convert keywords); the encoded modes store images whose shorter side is already 224.
CONFIGS = [
    ("passthrough", {"image_mode": "passthrough"}),
    ("jpeg q90 --resize 224", {"image_mode": "jpeg", "resize": SIDE, "quality": 90}),
    ("webp q90 --resize 224", {"image_mode": "webp", "resize": SIDE, "quality": 90}),
    ("png --resize 224", {"image_mode": "png", "resize": SIDE}),
    ("raw 224x224, none", {"image_mode": "raw", "size": (SIDE, SIDE), "compression": "none"}),
    ("raw 224x224, gzip 4", {"image_mode": "raw", "size": (SIDE, SIDE), "compression": "gzip",
                             "compression_level": 4}),
    ("raw 224x224, lzf", {"image_mode": "raw", "size": (SIDE, SIDE), "compression": "lzf"}),
]
NAIVE_CHUNK = 1000


def to_tensor_224(image: Image.Image) -> torch.Tensor:
    """Resize the shorter side to 224 (bilinear, skipped when already 224), center crop, CHW uint8."""
    width, height = image.size
    if min(width, height) != SIDE:
        scale = SIDE / min(width, height)
        image = image.resize((max(SIDE, round(width * scale)), max(SIDE, round(height * scale))),
                             Image.Resampling.BILINEAR)
        width, height = image.size
    left, top = (width - SIDE) // 2, (height - SIDE) // 2
    image = image.crop((left, top, left + SIDE, top + SIDE))
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


class IndexSampler(torch.utils.data.Sampler):
    """Yields whatever indices were set last, so persistent workers can serve several epochs."""

    def __init__(self) -> None:
        self.indices: List[int] = []

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class NaiveH5Dataset(torch.utils.data.Dataset):
    """The widely copied recipe: one HDF5 file, (N, 3, 224, 224) uint8 chunked by 1000 with gzip,
    h5py.File opened in every __getitem__."""

    def __init__(self, path: str) -> None:
        self.path = path
        with h5py.File(path, "r") as handle:
            self.length = len(handle["labels"])

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        with h5py.File(self.path, "r") as handle:
            return torch.from_numpy(handle["images"][index]), int(handle["labels"][index])


class ReadTimer:
    """One persistent 2-worker DataLoader over a dataset; each epoch() reads `samples` random indices."""

    def __init__(self, dataset: Any, samples: int, batch_size: int, workers: int, seed: int) -> None:
        self.dataset = dataset
        self.samples = min(samples, len(dataset))
        self.sampler = IndexSampler()
        self.loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=self.sampler,
                                                  num_workers=workers, worker_init_fn=shardkit.worker_init_fn,
                                                  persistent_workers=workers > 0)
        self.generator = torch.Generator().manual_seed(seed)
        self.rates: List[float] = []
        self.sampler.indices = self._order()[:batch_size * max(1, workers)]
        for _ in self.loader:         # warm-up: start the workers, open the shards
            pass

    def _order(self) -> List[int]:
        return torch.randperm(len(self.dataset), generator=self.generator).tolist()

    def epoch(self) -> float:
        """Time one pass over fresh random indices; returns (and records) samples/s."""
        self.sampler.indices = self._order()[:self.samples]
        started = time.perf_counter()
        count = 0
        for images, _labels in self.loader:
            assert images.shape[1:] == (3, SIDE, SIDE) and images.dtype == torch.uint8
            count += len(images)
        self.rates.append(count / (time.perf_counter() - started))
        return self.rates[-1]

    def close(self) -> None:
        del self.loader


def build_naive(raw_dst: str, path: str) -> int:
    """Write the baseline file from a raw 224x224 dataset (same pixels); returns its bytes."""
    ds = shardkit.open_dataset(raw_dst, decode="numpy")
    count = len(ds)
    chunk = min(NAIVE_CHUNK, count)
    with h5py.File(path, "w") as handle:
        images = handle.create_dataset("images", shape=(count, 3, SIDE, SIDE), dtype=np.uint8,
                                       chunks=(chunk, 3, SIDE, SIDE), compression="gzip")
        labels = np.zeros(count, dtype=np.int64)
        for start in range(0, count, chunk):
            stop = min(count, start + chunk)
            block = np.empty((stop - start, 3, SIDE, SIDE), dtype=np.uint8)
            for index in range(start, stop):
                array, labels[index] = ds[index]
                block[index - start] = array.transpose(2, 0, 1)
            images[start:stop] = block
        handle.create_dataset("labels", data=labels)
    return os.path.getsize(path)


def dataset_for(dst: str, raw: bool) -> Any:
    if raw:
        return shardkit.open_dataset(dst, decode="tensor")
    return shardkit.open_dataset(dst, decode="pil", transform=to_tensor_224)


def run(args: argparse.Namespace) -> Dict[str, Any]:
    workdir = args.workdir or tempfile.mkdtemp(prefix="shardkit-image-modes-")
    os.makedirs(workdir, exist_ok=True)
    src = os.path.join(workdir, f"photos-{args.images}")
    if not os.path.isdir(src):
        print(f"drawing {args.images} ImageNet-like JPEGs in {src}", file=sys.stderr)
        make_photo_tree(src + ".tmp", args.images, seed=0)
        os.rename(src + ".tmp", src)
    source_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src) for f in fs)
    rows: List[Dict[str, Any]] = []
    timers: List[Any] = []
    raw_plain: Optional[str] = None
    for fmt in args.formats:
        for label, options in CONFIGS:
            dst = os.path.join(workdir, f"{fmt}-{label.split(',')[0].split()[0]}-{options.get('compression', '')}")
            row: Dict[str, Any] = {"format": fmt, "mode": label}
            try:
                report = shardkit.convert(src, dst, format=fmt, samples_per_shard=args.samples_per_shard,
                                          workers=args.convert_workers, overwrite=True, quiet=True, **options)
            except shardkit.UsageError as exc:
                row["refused"] = str(exc)
                rows.append(row)
                print(f"{fmt:5s} {label:24s} refused: {exc}", file=sys.stderr)
                continue
            raw = options["image_mode"] == "raw"
            if raw and options.get("compression") == "none" and raw_plain is None:
                raw_plain = dst
            row.update({"bytes": report.bytes_written, "samples": report.num_samples,
                        "convert_per_s": report.samples_per_second})
            rows.append(row)
            timers.append((row, ReadTimer(dataset_for(dst, raw), args.read_samples or report.num_samples,
                                          args.batch_size, args.workers, seed=1)))
            print(f"{fmt:5s} {label:24s} {report.bytes_written / 1e6:8.1f} MB  "
                  f"convert {report.samples_per_second:6.0f}/s", file=sys.stderr)
    naive: Dict[str, Any] = {}
    if raw_plain is not None and args.naive_samples > 0:
        path = os.path.join(workdir, "naive-1000-chunk-gzip.h5")
        naive.update({"bytes": build_naive(raw_plain, path), "samples_timed": args.naive_samples})
        timers.append((naive, ReadTimer(NaiveH5Dataset(path), args.naive_samples, args.naive_batch_size,
                                        args.workers, seed=2)))
    # Runs are interleaved (every dataset once per round) so a busy moment hits all of them alike.
    for round_number in range(args.runs):
        for row, timer in timers:
            rate = timer.epoch()
            print(f"round {round_number + 1}/{args.runs}  {row.get('format', 'h5py'):5s} "
                  f"{row.get('mode', 'naive recipe'):24s} read {rate:8.1f}/s", file=sys.stderr)
    for row, timer in timers:
        row["read_per_s"] = statistics.median(timer.rates)
        row["read_runs"] = [round(rate, 2) for rate in timer.rates]
        timer.close()
    # Ratios are paired by round (same moment, same load), then the median is taken.
    for row in rows:
        if "refused" in row:
            continue
        base = next((r for r in rows if r["format"] == row["format"] and r["mode"] == "passthrough"
                     and "refused" not in r), None)
        if base is not None:
            row["vs_passthrough"] = paired_ratio(row["read_runs"], base["read_runs"])
        if naive:
            row["vs_naive"] = paired_ratio(row["read_runs"], naive["read_runs"])
    if not args.keep and not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"images": args.images, "source_bytes": source_bytes, "rows": rows, "naive": naive,
            "settings": {"batch_size": args.batch_size, "workers": args.workers, "runs": args.runs,
                         "convert_workers": args.convert_workers, "samples_per_shard": args.samples_per_shard,
                         "naive_batch_size": args.naive_batch_size},
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                        "h5py": h5py.__version__, "loadavg_after": [round(v, 2) for v in os.getloadavg()]}}


def paired_ratio(rates: Sequence[float], baseline: Sequence[float]) -> float:
    """Median over rounds of rate / baseline rate measured in the same round."""
    return statistics.median(a / b for a, b in zip(rates, baseline))


def markdown(result: Dict[str, Any]) -> str:
    """The results as the table of docs/benchmarks.md."""
    rows = [row for row in result["rows"] if "refused" not in row]
    naive = result["naive"].get("read_per_s")
    lines = ["| format | mode | MB on disk | bytes/sample | convert samples/s | read samples/s "
             "| read vs passthrough | read vs 1000-chunk recipe |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        versus_base = f"{row['vs_passthrough']:.1f}x" if "vs_passthrough" in row else "-"
        versus_naive = f"{row['vs_naive']:,.0f}x" if "vs_naive" in row else "-"
        lines.append(f"| {row['format']} | {row['mode']} | {row['bytes'] / 1e6:.1f} "
                     f"| {row['bytes'] / row['samples']:,.0f} | {row['convert_per_s']:.0f} "
                     f"| {row['read_per_s']:.0f} | {versus_base} | {versus_naive} |")
    for row in result["rows"]:
        if "refused" in row:
            lines.append(f"| {row['format']} | {row['mode']} | refused: {row['refused']} | | | | | |")
    if naive:
        n = result["naive"]
        lines.append(f"| h5py | one file, (N,3,224,224) gzip, chunks of 1000, reopened per item "
                     f"| {n['bytes'] / 1e6:.1f} | | | {naive:.2f} | | 1x |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=2000, help="images in the generated tree")
    parser.add_argument("--formats", default="hdf5",
                        help=f"comma-separated format names ({','.join(format_names())}) or all")
    parser.add_argument("--runs", type=int, default=3, help="timed read epochs per dataset (median reported)")
    parser.add_argument("--read-samples", type=int, default=1000, help="samples per read epoch (0: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--convert-workers", type=int, default=2)
    parser.add_argument("--samples-per-shard", type=int, default=500)
    parser.add_argument("--naive-samples", type=int, default=16, help="samples timed per baseline run (slow)")
    parser.add_argument("--naive-batch-size", type=int, default=4)
    parser.add_argument("--workdir", default=None, help="keep the tree and datasets here (reused)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    args.formats = format_names() if args.formats == "all" else \
        [name.strip() for name in args.formats.split(",") if name.strip()]
    started = time.perf_counter()
    result = run(args)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["command"] = "python benchmarks/image_modes.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    print(markdown(result))
    print(f"\n{result['images']} images ({result['source_bytes'] / 1e6:.1f} MB of JPEG), "
          f"{result['seconds']:.0f} s in all; {json.dumps(result['machine'])}")


if __name__ == "__main__":
    main()
