"""shardkit.write of samples of named fields: its rate per format against a plain loop, and its
peak memory writing a million small samples from a generator.

Rate: --samples (default 20,000) samples of an encoded image (JPEG, 64 px a side, from a pool of
--distinct drawn ones), a caption (text) and boxes (a float32 (n, 4) array, n from 0 to 4), with
shardkit's checksums (CRC32 of every value, sha256 of every file; they are always on). In each
of --repeat interleaved rounds, per format:
  * plain loop: the least a writer with the same guarantees does: per shard of --per-shard
    samples, one file per field written with Python's file API, a zlib CRC32 per value, then
    fsync, rename and sha256 of each file (no schema check, no image check, no index);
  * shardkit.write with the fields declared, order "source" and "shuffled" (buffer 1000), each
    image decoded (draft scale) to prove it decodes; and with the image field's validate "none"
    (its bytes stored after a look at their magic number, as peers store them);
each contender's median samples/s and its ratio to the plain loop's median in the same run.

Memory: shardkit.write of --million samples ({"n": int, "x": float, "t": str}) from a generator,
in a child process, with --shard-size (default 8MB), shuffled through the default buffer of
1,000 samples; and the same child stopping after --million / 100 samples, its baseline: the
peak RSS (VmHWM) of each child (also at 1/10 and 3/10 of --million): it grows until a shard is full,
then stays flat, when the writer holds at most the shuffle buffer and one shard. Run:

    PYTHONPATH=. python benchmarks/fields_write.py --repeat 3
    PYTHONPATH=. python benchmarks/fields_write.py --samples 2000 --million 20000 --repeat 1   # quick look
"""
from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any, Callable, Dict, List

import numpy as np

import shardkit


FIELDS = {"image": "image", "caption": "text", "boxes": {"type": "array", "dtype": "float32", "shape": [None, 4]}}
CHILD = """
import sys, shardkit
count, dst, shard_size = int(sys.argv[1]), sys.argv[2], sys.argv[3]
samples = ({"n": n, "x": n * 0.5, "t": f"sample number {n}"} for n in range(count))
shardkit.write(samples, dst, shard_size=shard_size)
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(int(peak.split()[1]) * 1024)
"""


def make_samples(count: int, distinct: int) -> List[Dict[str, Any]]:
    """`count` samples drawing on `distinct` JPEG images."""
    from PIL import Image
    rng = np.random.default_rng(5)
    images = []
    for number in range(distinct):
        pixels = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
        pixels[::2] = pixels[::2] // 4 + 100                    # some structure for the encoder
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=80)
        images.append(out.getvalue())
    return [{"image": images[n % distinct], "caption": f"a photo of thing {n} on a table, seen from above",
             "boxes": rng.random((n % 5, 4)).astype(np.float32)} for n in range(count)]


def plain_loop(samples: List[Dict[str, Any]], dst: str, per_shard: int) -> None:
    """Per shard, one file per field: values back to back, a CRC32 each, fsync, rename, sha256."""
    os.makedirs(dst)
    for shard, start in enumerate(range(0, len(samples), per_shard)):
        for field in FIELDS:
            final = os.path.join(dst, f"shard-{shard:05d}.{field}.bin")
            crcs = []
            with open(final + ".tmp", "wb") as handle:
                for sample in samples[start:start + per_shard]:
                    value = sample[field]
                    data = value.encode() if isinstance(value, str) else value.tobytes() \
                        if isinstance(value, np.ndarray) else value
                    crcs.append(zlib.crc32(data))
                    handle.write(data)
                handle.write(np.asarray(crcs, dtype="<u4").tobytes())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(final + ".tmp", final)
            with open(final, "rb") as handle:
                hashlib.sha256(handle.read()).hexdigest()


def rates(samples: List[Dict[str, Any]], work: str, repeat: int, per_shard: int) -> Dict[str, List[float]]:
    """samples/s of every contender, `repeat` interleaved rounds."""
    contenders: Dict[str, Callable[[str], Any]] = {"plain loop": lambda dst: plain_loop(samples, dst, per_shard)}
    unchecked = {**FIELDS, "image": {"type": "image", "validate": "none"}}
    for fmt in ("hdf5", "lmdb", "pt"):
        for order, fields, what in (("source", FIELDS, ""), ("shuffled", FIELDS, ""),
                                    ("source", unchecked, ", images not decoded")):
            contenders[f"shardkit {fmt} {order}{what}"] = \
                lambda dst, fmt=fmt, order=order, fields=fields: shardkit.write(
                    samples, dst, fields, format=fmt, order=order, samples_per_shard=per_shard)
    measured: Dict[str, List[float]] = {name: [] for name in contenders}
    for fmt in ("hdf5", "lmdb", "pt"):             # each format's library loads before any timing
        shardkit.write(samples[:2], os.path.join(work, f"warm-{fmt}"), FIELDS, format=fmt)
    for _ in range(repeat):
        for name, run in contenders.items():
            dst = os.path.join(work, "out")
            shutil.rmtree(dst, ignore_errors=True)
            started = time.perf_counter()
            run(dst)
            measured[name].append(len(samples) / (time.perf_counter() - started))
    return measured


def peak_rss(count: int, work: str, shard_size: str) -> int:
    """Peak RSS in bytes of a child process writing `count` small samples from a generator."""
    dst = os.path.join(work, f"small-{count}")
    shutil.rmtree(dst, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, str(count), dst, shard_size], env=env, capture_output=True,
                          text=True, check=True)
    return int(done.stdout.split()[-1])


def report_rates(args: argparse.Namespace, work: str) -> None:
    samples = make_samples(args.samples, args.distinct)
    measured = rates(samples, work, args.repeat, args.per_shard)
    base = statistics.median(measured["plain loop"])
    print(f"writing {args.samples} image+caption+boxes samples, median of {args.repeat} (samples/s, ratio to the "
          "plain loop)\n| contender | samples/s | ratio |\n|---|---|---|")
    for name, values in measured.items():
        median = statistics.median(values)
        print(f"| {name} | {median:,.0f} | {median / base:.2f} |")


def report_memory(args: argparse.Namespace, work: str) -> None:
    counts = [args.million // 100, args.million // 10, args.million * 3 // 10, args.million]
    peaks = [peak_rss(count, work, args.shard_size) for count in counts]
    print(f"\npeak RSS writing small samples from a generator (--shard-size {args.shard_size}, shuffle buffer "
          "1000)\n| samples | peak RSS |\n|---|---|")
    for count, peak in zip(counts, peaks):
        print(f"| {count:,} | {peak / 2**20:.0f} MiB |")
    print(f"from {counts[2]:,} to {counts[3]:,} samples: {(peaks[3] - peaks[2]) / 2**20:+.1f} MiB "
          f"(ratio {peaks[3] / peaks[2]:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--distinct", type=int, default=200)
    parser.add_argument("--per-shard", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--million", type=int, default=1_000_000)
    parser.add_argument("--shard-size", default="8MB")
    parser.add_argument("--work", default=None)
    parser.add_argument("--only", choices=["rate", "memory"], default=None)
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="shardkit-fields-")
    if args.only != "memory":
        report_rates(args, work)
    if args.only != "rate":
        report_memory(args, work)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
