"""Shared fixtures: small generated image trees and converted datasets, per format."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from shardkit.formats import format_names
from shardkit.samples import make_image_tree

FORMATS = format_names()

# Conversions default to one process per CPU; the suite's small trees are written faster in one
# process (spawning workers costs more than they save), and its subprocesses inherit this.
# Tests of the default itself remove it.
os.environ["SHARDKIT_WORKERS"] = "1"


@pytest.fixture(scope="session")
def image_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 120-image ImageFolder tree (4 classes, JPEG/PNG, odd sizes, some nested)."""
    root = tmp_path_factory.mktemp("tree") / "images"
    make_image_tree(str(root), num_images=120, seed=1)
    return root


@pytest.fixture(params=FORMATS)
def fmt(request: pytest.FixtureRequest) -> str:
    """Every registered format name in turn."""
    return request.param


@pytest.fixture(scope="session")
def _converted_cache(tmp_path_factory: pytest.TempPathFactory, image_tree: Path) -> dict:
    return {"root": tmp_path_factory.mktemp("converted"), "tree": image_tree}


@pytest.fixture
def dataset_dir(_converted_cache: dict, fmt: str) -> Path:
    """image_tree converted once per format (passthrough, 16 samples per shard). Read-only."""
    dst = _converted_cache["root"] / fmt
    if not (dst / "manifest.json").exists():
        import shardkit
        shardkit.convert(str(_converted_cache["tree"]), str(dst), format=fmt, samples_per_shard=16, quiet=True)
    return dst


@pytest.fixture
def writable_dataset(dataset_dir: Path, tmp_path: Path) -> Path:
    """A private copy of dataset_dir that a test may damage."""
    copy = tmp_path / "dataset"
    shutil.copytree(dataset_dir, copy)
    return copy


def image_files(root: Path) -> list:
    """Relative paths of the image files below root, sorted like shardkit sorts them."""
    found = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            found.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(found, key=lambda rel: tuple(rel.split("/")))


def files_in_dataset_order(root: Path, dst: Path) -> list:
    """image_files(root) in the order DST stores them (its manifest's recorded order)."""
    from shardkit.manifest import load_manifest
    from shardkit.writing.plan import planned_order
    files = image_files(root)
    order = planned_order(len(files), load_manifest(str(dst)).order or {"kind": "source"})
    return files if order is None else [files[item] for item in order.tolist()]


def shard_files_held(root: "str | os.PathLike[str]") -> int:
    """How many distinct shard files of the dataset at root this process holds open right now, as a
    descriptor or a map: what max_open_shards bounds (Linux /proc)."""
    folder = os.path.join(os.path.realpath(root), "shards") + os.sep
    held = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(folder):
            held.add(target)
    with open("/proc/self/maps") as maps:
        for line in maps:
            name = line.split(None, 5)[-1].strip() if len(line.split(None, 5)) == 6 else ""
            if name.startswith(folder):
                held.add(name)
    return len(held)


@contextlib.contextmanager
def cache_held_by_another_thread(ds: Any) -> Iterator[None]:
    """Another thread holds ds's shard cache (as a thread reading while the process forks would),
    then lets it go."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with ds.shard_cache:
            held.set()
            release.wait(60)
    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join()


def assert_imports_no_numpy_module(setup: str, action: str) -> None:
    """Run setup, then action, in a fresh interpreter and fail if action imported a numpy module:
    one a DataLoader worker's first batch imports (numpy.ma, which np.unique imports on first use:
    60-190 ms) is imported again in every worker forked before the parent imported it, every epoch."""
    script = (f"import sys\n{setup}\nlazy = {{name for name in sys.modules if name.startswith('numpy.')}}\n"
              f"{action}\nadded = {{name for name in sys.modules if name.startswith('numpy.')}} - lazy\n"
              "assert not added, sorted(added)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
