"""Open shards across a fork (read/cache.py, runtime/forks.py): a child keeps what a fork copies whole
(rows located in their files, readers that are one read-only map) and opens the rest itself; a fork
of a process does no work for its datasets, and a cache another thread held at the fork does not
hang the child; DataLoader workers forked after open_shards() open no shard file."""
from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any, Callable, List

import numpy as np
import pytest
import torch.utils.data

import shardkit

from ..conftest import assert_imports_no_numpy_module, cache_held_by_another_thread, shard_files_held

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and /proc are Linux here")

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _in_child(target: Callable[..., None], *args: Any) -> int:
    """Run target(*args) in a forked child; its exit code (0: every check in it held)."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode is not None
    return child.exitcode


def _values(ds: Any) -> List[Any]:
    return [(bytes(memoryview(np.ascontiguousarray(ds[i][0]))), ds[i][1]) for i in range(len(ds))]


def _check_child(ds: Any, readers: tuple, expected: List[Any]) -> None:
    info = ds.shard_cache.info()
    raise SystemExit(0 if info.readers == readers and _values(ds) == expected else 3)


def test_a_child_keeps_map_only_readers_and_opens_the_rest(images_dataset: Path, fmt: str) -> None:
    with shardkit.open_dataset(images_dataset, decode=None) as ds, ds.shard_cache as cache:
        expected = _values(ds)
        shards = len(ds.manifest.shards)
        assert ds.open_shards() == shards and ds.shard_cache.info().readers == tuple(range(shards))
        kept = tuple(shard for shard in range(shards) if cache.reader(shard).inheritable)
        assert kept == (tuple(range(shards)) if fmt != "lmdb" else ())      # LMDB environments never cross
        assert _in_child(_check_child, ds, kept, expected) == 0
        assert _values(ds) == expected and ds.shard_cache.info().readers == tuple(range(shards))


@pytest.mark.parametrize("name", sorted(path.name for path in GOLDEN.iterdir() if (path / "manifest.json").exists()))
def test_which_readers_a_fork_keeps_by_format_and_version(name: str) -> None:
    """What docs/training.md promises: uncompressed HDF5 shards of every version, .pt from version 3
    (each field's files of a dataset of named fields alike)."""
    fmt, version = name.split("-")[:2]
    kept = fmt == "hdf5" and "gzip" not in name and "lzf" not in name or fmt == "pt" and version == "v3"
    with shardkit.open_dataset(GOLDEN / name, decode=None) as ds:
        caches = [ds.shard_cache] if ds.manifest.fields is None else list(ds.field_caches.values())
        for cache in caches:
            with cache:
                assert cache.reader(0).inheritable == kept


def test_a_child_forked_while_a_thread_holds_the_cache_reads_without_waiting(images_dataset: Path) -> None:
    with shardkit.open_dataset(images_dataset, decode=None) as ds:
        expected = _values(ds)
        readers = ds.shard_cache.info().readers
        kept = readers if ds.manifest.format_name != "lmdb" else ()
        with cache_held_by_another_thread(ds):
            assert _in_child(_check_child, ds, kept, expected) == 0


def _nothing() -> None:
    raise SystemExit(0)


def test_a_fork_does_no_work_for_the_datasets_of_the_process(rows_dataset: Path) -> None:
    """A process with an open dataset that never read forks (a pool of the user's own): the fork
    opens, places and holds nothing of the dataset, in the parent or the child."""
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    assert _in_child(_nothing) == 0
    info = ds.shard_cache.info()
    assert not (info.open or info.placed or info.readers) and shard_files_held(rows_dataset) == 0
    ds.close()


def _collate(batch: List[Any]) -> List[Any]:
    return [(payload.tolist(), label) for payload, label in batch]


def test_workers_forked_after_open_shards_open_no_shard_file(rows_dataset: Path) -> None:
    """open_shards() locates every shard's rows in the parent; the shards then move away, and the
    non-persistent workers of two epochs still read every sample, from the rows they inherited."""
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        expected = sorted((ds[i][0].tolist(), ds[i][1]) for i in range(len(ds)))
        ds.close()
        shards = len(ds.manifest.shards)
        assert ds.open_shards() == shards and ds.shard_cache.info().placed == tuple(range(shards))
        assert not ds.shard_cache.info().readers        # rows need no reader: the parent holds no descriptor
        (rows_dataset / "shards").rename(rows_dataset / "elsewhere")
        try:
            for _ in range(2):
                loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=_collate,
                                                     multiprocessing_context="fork",
                                                     sampler=torch.utils.data.RandomSampler(ds))
                assert sorted(sample for batch in loader for sample in batch) == expected
        finally:
            (rows_dataset / "elsewhere").rename(rows_dataset / "shards")


@pytest.mark.parametrize("fmt", ["lmdb"])
def test_workers_open_again_what_a_fork_cannot_keep(images_dataset: Path, tmp_path: Path) -> None:
    """LMDB records (encoded images) need their environment, which a fork cannot keep: workers open
    the shards again, and with the shard files moved away fail naming one."""
    files = sorted((images_dataset / "shards").iterdir())
    with shardkit.open_dataset(images_dataset, decode=None) as ds:
        ds.open_shards()
        for path in files:
            path.rename(tmp_path / path.name)
        try:
            loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=list,
                                                 multiprocessing_context="fork")
            with pytest.raises(shardkit.CorruptShardError, match=r"shard-0000\d"):
                list(loader)
        finally:
            for path in files:
                (tmp_path / path.name).rename(path)


def _read_all(ds: Any, expected: List[Any]) -> None:
    raise SystemExit(0 if _values(ds) == expected and os.getpid() else 3)


def test_a_child_of_a_child_reads_as_its_parent(images_dataset: Path) -> None:
    """Forks nest: each generation notices it is new and keeps only what it may."""
    with shardkit.open_dataset(images_dataset, decode=None) as ds:
        expected = _values(ds)
        assert _in_child(_in_grandchild, ds, expected) == 0


def _in_grandchild(ds: Any, expected: List[Any]) -> None:
    ok = _values(ds) == expected
    raise SystemExit(0 if ok and _in_child(_read_all, ds, expected) == 0 else 3)


def test_a_batch_read_imports_nothing_a_forked_worker_would_import_every_epoch(tmp_path: Path) -> None:
    """A DataLoader worker that is not persistent is forked anew each epoch: a module its first
    batch read imports (numpy.ma, which np.unique imports on first use: 60-190 ms) is imported
    again every epoch, in every worker. A fresh process reading batches of every format imports
    none of the lazily imported numpy modules."""
    setup = (
        "import numpy as np, shardkit\n"
        "order = np.random.default_rng(0).permutation(200).tolist()\n"
        "datasets = [shardkit.open_dataset(shardkit.write(\n"
        "    ({'image': bytes([n]) * 300, 'caption': str(n)} for n in range(200)),\n"
        f"    {str(tmp_path)!r} + '/' + fmt, {{'image': 'bytes', 'caption': 'text'}},\n"
        "    format=fmt, samples_per_shard=50).dst, fields=('image', 'caption')) for fmt in ('hdf5', 'lmdb', 'pt')]\n")
    assert_imports_no_numpy_module(setup, "assert [len(ds.__getitems__(order)) for ds in datasets] == [200] * 3")
