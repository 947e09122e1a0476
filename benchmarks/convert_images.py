"""Image-tree conversion at scale: shardkit against plain loops, in one run, warm page cache.

On a generated tree of JPEGs (default 20,000, 40-100 px a side; `--sizes 256 512` gives
photo-like files of about 40 KiB), interleaved repeats of:
  * LMDB loop: one process walks the sorted files, reads each and puts it into one LMDB
    (one write transaction per 1,000 files) — the least a converter can do; the list of files
    is handed to it, so a second row also times the loop finding them (os.walk, sorted);
  * shardkit --validate none, 1 process, --format lmdb;
  * Pillow decode: one process fully decodes every file (Image.open + load), and again at
    1/8 DCT scale (draft mode, what --validate full decodes: the ceiling of the full target);
  * shardkit --validate full (draft-mode decode for JPEG), 1 process, --format lmdb;
  * shardkit --validate fast, 1 process, --format lmdb;
  * shardkit --validate full with 2 worker processes, forked (this process runs one thread, as
    the shardkit command does: see OPENBLAS_NUM_THREADS below), and again spawned (a second
    thread runs during the conversion, so shardkit does not fork): what forking saves.
Each contender's median images/s and median CPU time per image (this process and its worker
processes, from resource.getrusage: what load from other users disturbs least), and the
targets as ratios of both: none >= 0.8x the LMDB loop, full >= 1.5x the Pillow decode,
2 workers >= 1.8x 1 worker. The CPU ratio of 2 workers is 1 worker's CPU time over the
parent's plus half the workers' (the rate two idle cores would give); the last line splits it
into the parent's serial share and the workers' CPU beyond one process's. Run:

    PYTHONPATH=. python benchmarks/convert_images.py --images 20000 --repeat 3 --tree /tmp/jpegs
    PYTHONPATH=. python benchmarks/convert_images.py --sizes 256 512 --distinct 1000 --tree /tmp/photos

--distinct N draws only N different images and copies them to fill the tree (each copy its own
file), which makes a large tree of big images quick to generate; conversion cost does not
depend on whether two files hold the same bytes.
"""
from __future__ import annotations

import os

# As the shardkit command does: numpy's OpenBLAS then starts no thread pool, this process runs one
# thread, and shardkit forks its shard writers instead of spawning them (see docs/api.md).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Callable, Dict, List, Tuple  # noqa: E402

import lmdb  # noqa: E402
from PIL import Image  # noqa: E402

import shardkit  # noqa: E402
from shardkit.samples import make_image_tree  # noqa: E402

PER_SHARD = 1000


def make_tree(root: str, images: int, sizes: Tuple[int, int], distinct: int) -> List[str]:
    """The JPEG tree (reused when root already holds it); every file's path, sorted."""
    distinct = min(distinct, images) if distinct > 0 else images
    marker = os.path.join(root, f".complete-{images}-{sizes[0]}-{sizes[1]}-{distinct}")
    if not os.path.exists(marker):
        shutil.rmtree(root, ignore_errors=True)
        drawn = make_image_tree(root, num_images=distinct, sizes=sizes, jpeg_fraction=1.0, seed=7)
        for number in range(distinct, images):
            original = drawn[number % distinct]
            folder, name = os.path.split(original)
            shutil.copyfile(os.path.join(root, original), os.path.join(root, folder, f"copy{number:06d}-{name}"))
        open(marker, "w").close()
    paths = []
    for dirpath, _, names in os.walk(root):
        paths.extend(os.path.join(dirpath, name) for name in names if name.endswith(".jpg"))
    return sorted(paths)


def lmdb_loop(paths: List[str], dst: str) -> None:
    """Read each file of the sorted list and put it into one LMDB."""
    env = lmdb.open(dst, map_size=1 << 34, subdir=True)
    for start in range(0, len(paths), PER_SHARD):
        with env.begin(write=True) as txn:
            for number, path in enumerate(paths[start:start + PER_SHARD], start):
                with open(path, "rb") as handle:
                    txn.put(b"%08d" % number, handle.read())
    env.sync()
    env.close()


def listed_lmdb_loop(paths: List[str], dst: str) -> None:
    """lmdb_loop, finding the files itself first (os.walk, sorted), as a converter must."""
    found = []
    for dirpath, _, names in os.walk(ROOT):
        found.extend(os.path.join(dirpath, name) for name in names if name.endswith(".jpg"))
    lmdb_loop(sorted(found), dst)


def pillow_decode(paths: List[str], dst: str) -> None:
    for path in paths:
        with Image.open(path) as image:
            image.load()


def pillow_draft_decode(paths: List[str], dst: str) -> None:
    """pillow_decode at 1/8 DCT scale (what --validate full decodes): the least a full check costs."""
    for path in paths:
        with Image.open(path) as image:
            image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()


def shardkit_convert(validate: str, workers: int, second_thread: bool = False) -> Callable[[List[str], str], None]:
    """shardkit.convert of the tree; with second_thread, while another thread of this process
    runs (which makes shardkit spawn its workers, not fork them)."""
    def run(paths: List[str], dst: str) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait) if second_thread else None
        if thread is not None:
            thread.start()
        try:
            shardkit.convert(ROOT, dst, format="lmdb", samples_per_shard=PER_SHARD, validate=validate,
                             workers=workers, quiet=True)
        finally:
            stop.set()
            if thread is not None:
                thread.join()
    return run


ROOT = ""


def cpu_seconds() -> Tuple[float, float]:
    """(this process, its finished child processes) user + system CPU seconds so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def main() -> None:
    global ROOT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs=2, default=(40, 100), metavar=("MIN", "MAX"),
                        help="smallest and largest side in pixels of the drawn images (default 40 100)")
    parser.add_argument("--distinct", type=int, default=0,
                        help="draw only this many different images and copy them (default: all different)")
    parser.add_argument("--tree", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-jpegs"))
    args = parser.parse_args()
    ROOT = args.tree
    paths = make_tree(ROOT, args.images, tuple(args.sizes), args.distinct)
    total_bytes = 0
    for path in paths:                          # warm the page cache
        with open(path, "rb") as handle:
            total_bytes += len(handle.read())
    contenders: Dict[str, Callable[[List[str], str], None]] = {
        "LMDB loop (1 process)": lmdb_loop,
        "LMDB loop listing the tree itself (1 process)": listed_lmdb_loop,
        "shardkit --validate none, 1 process": shardkit_convert("none", 1),
        "Pillow full decode (1 process)": pillow_decode,
        "Pillow 1/8-scale draft decode (1 process)": pillow_draft_decode,
        "shardkit --validate full, 1 process": shardkit_convert("full", 1),
        "shardkit --validate fast, 1 process": shardkit_convert("fast", 1),
        "shardkit --validate full, 2 workers": shardkit_convert("full", 2),
        "shardkit --validate full, 2 workers spawned (a second thread runs)": shardkit_convert("full", 2, True),
    }
    seconds: Dict[str, List[float]] = {name: [] for name in contenders}
    cpu: Dict[str, List[Tuple[float, float]]] = {name: [] for name in contenders}
    scratch = tempfile.mkdtemp(prefix="shardkit-bench-out-")
    try:
        for _ in range(args.repeat):
            for name, run in contenders.items():
                dst = os.path.join(scratch, "out")
                shutil.rmtree(dst, ignore_errors=True)
                started, (own, children) = time.perf_counter(), cpu_seconds()
                run(paths, dst)
                seconds[name].append(time.perf_counter() - started)
                own_after, children_after = cpu_seconds()
                cpu[name].append((own_after - own, children_after - children))
                shutil.rmtree(dst, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rate = {name: len(paths) / statistics.median(values) for name, values in seconds.items()}
    parent = {name: statistics.median(own for own, _ in values) for name, values in cpu.items()}
    workers = {name: statistics.median(children for _, children in values) for name, values in cpu.items()}
    load = os.getloadavg()[0]
    print(f"{len(paths)} JPEGs, {total_bytes / len(paths) / 1024:.1f} KiB each on average, "
          f"medians of {args.repeat}, CPUs {len(os.sched_getaffinity(0))}, 1-min load {load:.1f}")
    print("| contender | median s | images/s | CPU us/image (this process + workers) |")
    print("|---|---|---|---|")
    for name in contenders:
        print(f"| {name} | {statistics.median(seconds[name]):.2f} | {rate[name]:,.0f} | "
              f"{1e6 * parent[name] / len(paths):.0f} + {1e6 * workers[name] / len(paths):.0f} |")

    def cpu_per_image(name: str) -> float:
        return parent[name] + workers[name]

    none, loop = "shardkit --validate none, 1 process", "LMDB loop (1 process)"
    listed = "LMDB loop listing the tree itself (1 process)"
    full, decode = "shardkit --validate full, 1 process", "Pillow full decode (1 process)"
    draft = "Pillow 1/8-scale draft decode (1 process)"
    two = "shardkit --validate full, 2 workers"
    spawned = "shardkit --validate full, 2 workers spawned (a second thread runs)"
    targets = [
        ("--validate none / LMDB loop", rate[none] / rate[loop], cpu_per_image(loop) / cpu_per_image(none), "0.8"),
        ("(--validate none / LMDB loop listing the tree)", rate[none] / rate[listed],
         cpu_per_image(listed) / cpu_per_image(none), "-"),
        ("--validate full / Pillow decode", rate[full] / rate[decode], cpu_per_image(decode) / cpu_per_image(full),
         "1.5"),
        ("(Pillow draft decode / Pillow decode: the most full can reach)", rate[draft] / rate[decode],
         cpu_per_image(decode) / cpu_per_image(draft), "-"),
        ("2 workers / 1 worker (full)", rate[two] / rate[full], cpu_per_image(full) / (parent[two] + workers[two] / 2),
         "1.8"),
        ("(2 workers spawned / 1 worker)", rate[spawned] / rate[full],
         cpu_per_image(full) / (parent[spawned] + workers[spawned] / 2), "-"),
    ]
    print("\n| target | wall ratio | CPU ratio | needed |")
    print("|---|---|---|---|")
    for name, ratio, cpu_ratio, needed in targets:
        print(f"| {name} | {ratio:.2f} | {cpu_ratio:.2f} | {needed} |")
    # Where 2 workers lose against 1 process: the parent's own CPU (the scan, planning, the
    # manifest: serial) and what the workers spend beyond one process's CPU (their start-up: a
    # fork, or when spawned a new interpreter importing shardkit, numpy, Pillow and the format's library each).
    serial = parent[two] / (parent[two] + workers[two])
    extra = (workers[two] - cpu_per_image(full)) / 2
    print(f"\n2 workers, CPU per image: parent {1e6 * parent[two] / len(paths):.1f} us (serial fraction "
          f"{serial:.3f}), workers {1e6 * workers[two] / len(paths):.1f} us against 1 process's "
          f"{1e6 * cpu_per_image(full) / len(paths):.1f} us ({1e3 * extra:.0f} ms more CPU per worker)")


if __name__ == "__main__":
    main()
