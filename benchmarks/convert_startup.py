"""What a `shardkit convert` command costs on a small tree, per format: the whole process, start-up
included (what a user waits for, and what every conversion in a test suite or a per-folder script
pays).

Interleaved repeats of `python -m shardkit convert SRC DST --format F --workers 1` in fresh
processes, for every format, and `python -c "import torch"` beside them for scale; medians of
--repeat runs, and each format's ratio to HDF5's median measured in the same run. Run:

    PYTHONPATH=. python benchmarks/convert_startup.py --images 200 --repeat 5

Results: docs/benchmarks.md ("Image conversion").
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(command: List[str]) -> float:
    """Seconds one command takes to exit (it must succeed)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200, help="images in the generated tree")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (median)")
    parser.add_argument("--formats", default="hdf5,lmdb,pt")
    args = parser.parse_args()
    sys.path.insert(0, REPO)
    from shardkit.samples import make_image_tree
    work = tempfile.mkdtemp(prefix="convert-startup-")
    try:
        src = os.path.join(work, "src")
        make_image_tree(src, num_images=args.images, seed=1)
        commands = {fmt: [sys.executable, "-m", "shardkit", "convert", src, os.path.join(work, fmt), "--format",
                          fmt, "--workers", "1", "--overwrite", "--quiet"] for fmt in args.formats.split(",")}
        commands["import torch"] = [sys.executable, "-c", "import torch"]
        seconds: Dict[str, List[float]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, command in commands.items():
                seconds[name].append(timed(command))
        base = statistics.median(seconds["hdf5"]) if "hdf5" in seconds else None
        print(f"{args.images} images, median of {args.repeat} runs each")
        print(f"{'command':<14} {'seconds':>8} {'x hdf5':>7}")
        for name, runs in seconds.items():
            median = statistics.median(runs)
            ratio = f"{median / base:7.2f}" if base else ""
            print(f"{name:<14} {median:8.2f} {ratio}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
