"""Samples of named fields against MosaicML Streaming (MDSWriter) and LitData (optimize): the write
rate, random reads through a DataLoader, and what reading one field of three costs.

Samples: --samples (default 20,000) of an encoded JPEG (64 px a side, from a pool of --distinct),
a caption (text) and boxes (float32 (n, 4), n from 1 to 4: MDS refuses an empty array), made
alike in every process. Every contender writes in a child process of its own and reads in
another (as a training job reads what was written before), in --repeat interleaved rounds;
shardkit in this Python, the peers in --peer-python (a venv of their own: they are not
shardkit's dependencies).
  * write: shardkit.write(..., format=F) for each format (CRC32 of every value and sha256 of every
    file always on; each image decoded once to prove it decodes; and again with the image's
    validate "none", which only looks at the bytes' magic number, as the peers store bytes),
    MDSWriter with columns image "bytes", caption "str", boxes "ndarray:float32", and
    litdata.optimize(fn, num_workers=1) of a function returning the same dict (one writer
    process each, as shardkit.write is);
  * read: every sample once in a seeded random order, image (stored bytes) and caption (str),
    through DataLoader(batch_size=256, num_workers=2) from local disk (shardkit through
    __getitems__, the peers through their ds[i] in a map-style wrapper, as their docs show);
  * one field of three (shardkit only, each format): every caption read in a random order with
    ds.__getitems__ in batches of 256, from the three-field dataset with fields=("caption",) and
    from a dataset holding only the captions; after an untimed pass that opens every shard, the
    median of CAPTION_PASSES passes of each, alternated.
Reported: each contender's median and its ratio to the peers' medians (ratios above 1: shardkit
faster). Run:

    PYTHONPATH=. .venv/bin/python benchmarks/fields_peers.py --peer-python /work/bench-venv/bin/python
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np

FORMATS = ("hdf5", "lmdb", "pt")
#: shardkit with the image field's validate "none": its bytes stored after a look at their magic
#: number, as the peers store bytes
UNCHECKED = tuple(f"{fmt} validate=none" for fmt in FORMATS)
PEERS = ("mds", "litdata")
MARK = "RESULT "
#: Timed passes over the captions of each dataset, alternated (each a ~0.05 s read: one alone is noise).
CAPTION_PASSES = 5
_SAMPLES: List[Dict[str, Any]] = []


def make_samples(count: int, distinct: int) -> List[Dict[str, Any]]:
    from PIL import Image
    rng = np.random.default_rng(5)
    images = []
    for _ in range(distinct):
        pixels = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
        pixels[::2] = pixels[::2] // 4 + 100
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "JPEG", quality=80)
        images.append(out.getvalue())
    return [{"image": images[n % distinct], "caption": f"a photo of thing {n} on a table, seen from above",
             "boxes": rng.random((n % 4 + 1, 4)).astype(np.float32)} for n in range(count)]


def keep(batch: Any) -> Any:
    return batch


class Items:
    """A peer's dataset as a map-style one: its ds[i], image and caption."""

    def __init__(self, dataset: Any, length: int) -> None:
        self.dataset, self.length = dataset, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        sample = self.dataset[index]
        image = sample["image"]     # LitData gives a memoryview, which cannot go back from a worker
        return bytes(image) if isinstance(image, memoryview) else image, sample["caption"]


def timed_epoch(dataset: Any, count: int) -> float:
    """Seconds to read every sample once in a seeded random order through a DataLoader."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler
    sampler = RandomSampler(range(count), generator=torch.Generator().manual_seed(3))
    started = time.perf_counter()
    seen = sum(len(batch) for batch in DataLoader(dataset, batch_size=256, num_workers=2, sampler=sampler,
                                                  collate_fn=keep))
    assert seen == count
    return time.perf_counter() - started


def child_shardkit(fmt: str, work: str, phase: str, validate: Optional[str] = None) -> Dict[str, float]:
    import shardkit
    dst, alone = os.path.join(work, "ds"), os.path.join(work, "captions")
    if phase == "write":
        image = {"type": "image"} if validate is None else {"type": "image", "validate": validate}
        fields = {"image": image, "caption": "text",
                  "boxes": {"type": "array", "dtype": "float32", "shape": [None, 4]}}
        # untimed: ten samples load the modules a write uses (torch for pt, h5py, Pillow), as each
        # peer's child imports its library before its clock starts
        shardkit.write(_SAMPLES[:10], os.path.join(work, "warm"), fields, format=fmt, order="source")
        started = time.perf_counter()
        shardkit.write(_SAMPLES, dst, fields, format=fmt, order="source")
        written = time.perf_counter() - started
        shardkit.write(({"caption": sample["caption"]} for sample in _SAMPLES), alone, {"caption": "text"},
                       format=fmt, order="source")
        return {"write": written}
    count = len(_SAMPLES)
    ds = shardkit.open_dataset(dst, fields=("image", "caption"), decode={"image": None, "caption": "pil"})
    read = timed_epoch(ds, count)
    order = np.random.default_rng(4).permutation(count).tolist()
    datasets = {"caption of three": shardkit.open_dataset(dst, fields=("caption",)),
                "caption alone": shardkit.open_dataset(alone, fields=("caption",))}
    passes: Dict[str, List[float]] = {name: [] for name in datasets}
    for number in range(1 + CAPTION_PASSES):        # the first pass opens every shard: untimed
        for name, one in (datasets.items() if number % 2 else reversed(datasets.items())):
            started = time.perf_counter()
            for start in range(0, len(order), 256):
                one.__getitems__(order[start:start + 256])
            if number:
                passes[name].append(time.perf_counter() - started)
    for one in datasets.values():
        one.close()
    return {"read": read, **{name: statistics.median(times) for name, times in passes.items()}}


def _peer_imports() -> None:
    """The peer venv's torchvision build may not load against its torch (a missing operator);
    MDS imports it only for its vision datasets, unused here, so a stub stands in then."""
    import importlib.machinery
    import types
    try:
        import torchvision  # noqa: F401
    except Exception:       # noqa: BLE001 - any failure to load it
        for name in [name for name in sys.modules if name.startswith("torchvision")]:
            del sys.modules[name]
        for name in ("torchvision", "torchvision.datasets", "torchvision.transforms",
                     "torchvision.transforms.functional"):
            module = types.ModuleType(name)
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = module
        sys.modules["torchvision.datasets"].VisionDataset = object        # type: ignore[attr-defined]
        sys.modules["torchvision.datasets"].CIFAR10 = object              # type: ignore[attr-defined]
        sys.modules["torchvision.transforms.functional"].to_tensor = None  # type: ignore[attr-defined]


def child_mds(work: str, phase: str) -> Dict[str, float]:
    _peer_imports()
    from streaming import MDSWriter, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    dst = os.path.join(work, "mds")
    if phase == "write":
        started = time.perf_counter()
        with MDSWriter(out=dst, columns={"image": "bytes", "caption": "str", "boxes": "ndarray:float32"}) as writer:
            for sample in _SAMPLES:
                writer.write(sample)
        return {"write": time.perf_counter() - started}
    ds = StreamingDataset(local=dst, shuffle=False, batch_size=256)
    return {"read": timed_epoch(Items(ds, len(_SAMPLES)), len(_SAMPLES))}


def _litdata_sample(index: int) -> Dict[str, Any]:
    return _SAMPLES[index]


def child_litdata(work: str, phase: str) -> Dict[str, float]:
    _peer_imports()
    import litdata
    dst = os.path.join(work, "litdata")
    if phase == "write":
        started = time.perf_counter()
        litdata.optimize(fn=_litdata_sample, inputs=list(range(len(_SAMPLES))), output_dir=dst,
                         chunk_bytes="64MB", num_workers=1, start_method="fork")
        return {"write": time.perf_counter() - started}
    ds = litdata.StreamingDataset(input_dir=dst)
    return {"read": timed_epoch(Items(ds, len(_SAMPLES)), len(_SAMPLES))}


def run_child(args: argparse.Namespace) -> None:
    """One phase of one contender in this process: the write (samples made here first), or the
    read of what that write left in args.work."""
    if args.phase == "write":
        _SAMPLES.extend(make_samples(args.samples, args.distinct))
    else:       # the read phases only count them
        _SAMPLES.extend([{}] * args.samples)
    if args.child in FORMATS:
        result = child_shardkit(args.child, args.work, args.phase)
    elif args.child in UNCHECKED:
        result = child_shardkit(args.child.split()[0], args.work, args.phase, "none")
    else:
        result = child_mds(args.work, args.phase) if args.child == "mds" else child_litdata(args.work, args.phase)
    print(MARK + json.dumps(result), flush=True)


def one_round(args: argparse.Namespace, name: str) -> Dict[str, float]:
    """A contender's write, then its reads in a new process (a training job reads shards written
    earlier; reading in the process that just wrote 20,000 samples measures that process's heap:
    a DataLoader worker forked from it inherits the garbage collector's state, and its first
    collection may be a full pass over the writer's objects)."""
    python = args.peer_python if name in PEERS else sys.executable
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    work = tempfile.mkdtemp(prefix="fields-peers-", dir=args.work)
    result: Dict[str, float] = {}
    try:
        for phase in ("write", "read"):
            os.sync()           # no contender pays for the writeback of another's files
            done = subprocess.run([python, __file__, "--child", name, "--phase", phase, "--samples",
                                   str(args.samples), "--distinct", str(args.distinct), "--work", work],
                                  env=env, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
            if done.returncode or not lines:
                raise SystemExit(f"{name} {phase} failed:\n{done.stderr[-3000:]}")
            result.update(json.loads(lines[-1][len(MARK):]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def report(args: argparse.Namespace) -> None:
    names = [*FORMATS, *UNCHECKED, *PEERS]
    measured: Dict[str, List[Dict[str, float]]] = {name: [] for name in names}
    for _ in range(args.repeat):
        for name in names:
            measured[name].append(one_round(args, name))

    def median(name: str, what: str) -> float:
        return statistics.median(result[what] for result in measured[name])
    count = args.samples
    for what, title in (("write", "writing"), ("read", "random reads of image and caption, DataLoader(256, 2)")):
        print(f"\n{title}: {count} samples, median of {args.repeat} (samples/s; ratio = shardkit's rate / the "
              "peer's)\n| contender | samples/s | vs MDS | vs LitData |\n|---|---|---|---|")
        for name in names:
            rate = count / median(name, what)
            print(f"| {name} | {rate:,.0f} | {median('mds', what) / median(name, what):.2f} | "
                  f"{median('litdata', what) / median(name, what):.2f} |")
    print(f"\none field of three: every caption in a random order, median of {args.repeat} (seconds)\n"
          "| format | caption of three | caption alone | ratio |\n|---|---|---|---|")
    for fmt in FORMATS:
        three, alone = median(fmt, "caption of three"), median(fmt, "caption alone")
        print(f"| {fmt} | {three:.3f} | {alone:.3f} | {three / alone:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--distinct", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--peer-python", default="/work/bench-venv/bin/python")
    parser.add_argument("--work", default=None)
    parser.add_argument("--child", choices=[*FORMATS, *UNCHECKED, *PEERS], default=None)
    parser.add_argument("--phase", choices=["write", "read"], default="write")
    args = parser.parse_args()
    if args.child:
        run_child(args)
        return
    own = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="shardkit-peers-")
    try:
        report(args)
    finally:
        if own:
            shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
