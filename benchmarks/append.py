"""`convert NEW_SRC DST --append` of 10% new inputs against converting everything again.

An ImageFolder tree of --images JPEG/PNG files (shardkit.samples.make_image_tree) is converted once
to DST; NEW_SRC holds --share of that many new images (other names, the same classes). Contenders,
each timed in this process, interleaved, medians of --repeat runs:
  * full reconversion: `convert` of OLD and NEW together (one tree) into an empty folder — what a
    user does without --append;
  * append: `convert NEW_SRC DST --append` on a fresh copy of DST (the copy is not timed).
Both with the same --workers and the default options (passthrough, full validation, hdf5).

    PYTHONPATH=. python benchmarks/append.py --images 20000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Dict, List

import shardkit
from shardkit.samples import make_image_tree


def make_trees(work: str, images: int, share: float) -> Dict[str, str]:
    """OLD, NEW (new file names) and ALL (both, hard-linked) trees under work."""
    old, new, union, drawn = (os.path.join(work, name) for name in ("old", "new", "all", "drawn"))
    make_image_tree(old, num_images=images, sizes=(32, 160), seed=1)
    make_image_tree(drawn, num_images=max(1, int(images * share)), sizes=(32, 160), seed=2)
    for folder, _, files in os.walk(drawn):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), drawn)
            target = os.path.join(new, os.path.dirname(rel), f"new-{name}")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(os.path.join(folder, name), target)
    for tree in (old, new):
        for folder, _, files in os.walk(tree):
            for name in files:
                rel = os.path.relpath(os.path.join(folder, name), tree)
                os.makedirs(os.path.dirname(os.path.join(union, rel)), exist_ok=True)
                os.link(os.path.join(folder, name), os.path.join(union, rel))
    return {"old": old, "new": new, "all": union}


def timed(function: "object", *args: object, **kwargs: object) -> float:
    started = time.perf_counter()
    function(*args, **kwargs)  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--share", type=float, default=0.10, help="new inputs, as a share of the old ones")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="worker counts to compare at, comma-separated")
    parser.add_argument("--work", default=None, help="folder for the trees and datasets (default: a temporary one)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="shardkit-append-", dir=args.work)
    try:
        trees = make_trees(work, args.images, args.share)
        base = os.path.join(work, "base")
        shardkit.convert(trees["old"], base)
        print(f"{args.images} images, {int(args.images * args.share)} new; medians of {args.repeat} runs\n")
        print("| workers | contender | samples after | seconds (median) | ratio to full reconversion |")
        print("|---|---|---|---|---|")
        for workers in (int(text) for text in args.workers.split(",")):
            _compare(work, trees, base, workers, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compare(work: str, trees: Dict[str, str], base: str, workers: int, repeat: int) -> None:
    times: Dict[str, List[float]] = {"full reconversion": [], "append": []}
    counts: Dict[str, int] = {}
    for run in range(repeat):
        full, appended = os.path.join(work, f"full{run}"), os.path.join(work, f"appended{run}")
        times["full reconversion"].append(timed(shardkit.convert, trees["all"], full, workers=workers))
        shutil.copytree(base, appended)
        times["append"].append(timed(shardkit.convert, trees["new"], appended, append=True, workers=workers))
        counts = {"full reconversion": len(shardkit.open_dataset(full)), "append": len(shardkit.open_dataset(appended))}
        shutil.rmtree(full)
        shutil.rmtree(appended)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, seconds in medians.items():
        print(f"| {workers} | {name} | {counts[name]} | {seconds:.3f} | {seconds / medians['full reconversion']:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
