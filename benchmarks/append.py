"""`convert NEW_SRC DST --append` of 10% new inputs against converting everything again.

An ImageFolder tree of --images JPEG/PNG files (shardkit.samples.make_image_tree) is converted once
to DST; NEW_SRC holds --share of that many new images (other names, the same classes). Contenders,
each timed in this process, interleaved, medians of --repeat runs:
  * full reconversion: `convert` of OLD and NEW together (one tree) into an empty folder — what a
    user does without --append;
  * append: `convert NEW_SRC DST --append` on a fresh copy of DST (the copy is not timed).
Both with the same --workers and the default options (passthrough, full validation, hdf5).

With --sidecars the inputs are samples of named fields instead: a tree of --images stems, each
a 64x64 PNG, a caption (.txt) and a class (.cls) sharing the stem, converted with `--sidecars
--label-field cls`; NEW holds --share of that many new stems.

With --tables ROWS the inputs are tables instead: OLD is one CSV of ROWS rows (numbers, a category
column, class labels), NEW a second CSV of --share of that many rows (with new categories and a
new class), ALL a folder of both; DST is converted from OLD with --label-column label.

    PYTHONPATH=. python benchmarks/append.py --images 20000 --repeat 3
    PYTHONPATH=. python benchmarks/append.py --tables 1000000 --repeat 3
    PYTHONPATH=. python benchmarks/append.py --sidecars --images 10000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Dict, List

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


def make_sidecars(work: str, stems: int, share: float) -> Dict[str, str]:
    """OLD, NEW (other stems) and ALL (both, hard-linked) sidecar trees under work: each stem a PNG,
    a caption and a class file."""
    import io

    import numpy as np
    from PIL import Image
    folders = {name: os.path.join(work, name) for name in ("old", "new", "all")}
    rng = np.random.default_rng(0)
    for name, numbers in (("old", range(stems)), ("new", range(stems, stems + max(1, int(stems * share))))):
        for number in numbers:
            group = f"g{number % 10}"
            out = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(out, "PNG")
            for folder in (folders[name], folders["all"]):
                os.makedirs(os.path.join(folder, group), exist_ok=True)
            files = {".png": out.getvalue(), ".txt": f"caption {number}".encode(), ".cls": "abc"[number % 3].encode()}
            for suffix, data in files.items():
                path = os.path.join(folders[name], group, f"{number:06d}{suffix}")
                with open(path, "wb") as handle:
                    handle.write(data)
                os.link(path, os.path.join(folders["all"], group, f"{number:06d}{suffix}"))
    return folders


def make_tables(work: str, rows: int, share: float) -> Dict[str, str]:
    """OLD (table.csv), NEW (new.csv: other rows, two new cities, a new class) and ALL (both) folders under work."""
    import numpy as np
    folders = {name: os.path.join(work, name) for name in ("old", "new", "all")}
    for folder in folders.values():
        os.makedirs(folder)
    for name, count, seed, cities, classes in (("old", rows, 1, ["Berlin", "Paris", "Rome"], ["cat", "dog"]),
                                               ("new", max(1, int(rows * share)), 2, ["Athens", "Paris", "Zurich"],
                                                ["dog", "emu"])):
        rng = np.random.default_rng(seed)
        numbers = rng.random((count, 4))
        lines = [f"{a:.6f},{b:.6f},{c:.6f},{int(d * 1000)},{cities[i % 3]},{classes[i % 2]}"
                 for i, (a, b, c, d) in enumerate(numbers.tolist())]
        path = os.path.join(folders[name], "table.csv" if name == "old" else "new.csv")
        with open(path, "w") as handle:
            handle.write("a,b,c,n,city,label\n" + "\n".join(lines) + "\n")
        os.link(path, os.path.join(folders["all"], os.path.basename(path)))
    return folders


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
    parser.add_argument("--tables", type=int, default=None, metavar="ROWS", help="tables of ROWS rows, not images")
    parser.add_argument("--sidecars", action="store_true", help="samples of named fields (a sidecar tree), not images")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="shardkit-append-", dir=args.work)
    try:
        count = args.tables if args.tables is not None else args.images
        options: Dict[str, Any] = {}
        if args.tables is not None:
            trees, options = make_tables(work, count, args.share), {"label_column": "label"}
        elif args.sidecars:
            trees, options = make_sidecars(work, count, args.share), {"sidecars": True, "label_field": "cls"}
        else:
            trees = make_trees(work, args.images, args.share)
        base = os.path.join(work, "base")
        shardkit.convert(trees["old"], base, quiet=True, **options)
        what = "table rows" if args.tables is not None else "samples of fields" if args.sidecars else "images"
        print(f"{count} {what}, {int(count * args.share)} new; medians of {args.repeat} runs\n")
        print("| workers | contender | samples after | seconds (median) | ratio to full reconversion |")
        print("|---|---|---|---|---|")
        for workers in (int(text) for text in args.workers.split(",")):
            _compare(work, trees, base, workers, args.repeat, options)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _compare(work: str, trees: Dict[str, str], base: str, workers: int, repeat: int, options: Dict[str, Any]) -> None:
    times: Dict[str, List[float]] = {"full reconversion": [], "append": []}
    counts: Dict[str, int] = {}
    for run in range(repeat):
        full, appended = os.path.join(work, f"full{run}"), os.path.join(work, f"appended{run}")
        os.sync()               # neither contender pays for the writeback of the other's files or of the copy
        times["full reconversion"].append(timed(shardkit.convert, trees["all"], full, workers=workers, quiet=True,
                                                **options))
        shutil.copytree(base, appended)
        os.sync()
        times["append"].append(timed(shardkit.convert, trees["new"], appended, append=True, workers=workers,
                                     quiet=True))
        counts = {"full reconversion": len(shardkit.open_dataset(full)), "append": len(shardkit.open_dataset(appended))}
        shutil.rmtree(full)
        shutil.rmtree(appended)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, seconds in medians.items():
        print(f"| {workers} | {name} | {counts[name]} | {seconds:.3f} | {seconds / medians['full reconversion']:.3f} |",
              flush=True)


if __name__ == "__main__":
    main()
