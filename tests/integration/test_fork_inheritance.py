"""Readers across a fork: a child keeps the map-only readers its parent opened (open_shards) and
opens everything else itself; DataLoader workers forked after open_shards open no shard file."""
from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any, List, Optional

import pytest
import torch.utils.data

import shardkit
from shardkit.read import shards as shards_module
from shardkit.read.openfiles import OPEN_FILES

from ..conftest import lru_held_by_another_thread

ROWS, PER_SHARD = 60, 4
#: Formats whose uncompressed shards a reader serves from one map and nothing else.
MAP_ONLY = ("hdf5", "pt")


@pytest.fixture()
def rows_dataset(tmp_path: Path, fmt: str) -> Path:
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},{i * 0.25},c{i % 3}\n" for i in range(ROWS)))
    dst = tmp_path / "ds"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=PER_SHARD, quiet=True)
    return dst


def _values(ds: Any) -> List[Any]:
    return [(ds[i][0].tolist(), ds[i][1]) for i in range(len(ds))]


def _in_child(target: Any, *args: Any) -> int:
    """Run target(*args) in a forked child; its exit code (0: every check held)."""
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
    assert child.exitcode is not None
    return child.exitcode


def _check_kept(ds: Any, parents: List[Any], expected: List[Any], kept: bool, held: Optional[int]) -> None:
    same = [ds._handles.slots[shard] is reader for shard, reader in enumerate(parents)]
    ok_before = same == [kept] * len(parents) and len(OPEN_FILES) == (len(parents) if kept else 0) \
        and (held is None or OPEN_FILES.held() == held)     # the budget counts what the child kept
    ok_reads = _values(ds) == expected
    raise SystemExit(0 if ok_before and ok_reads else 3)


def test_a_forked_child_keeps_the_map_only_readers_and_opens_the_rest(rows_dataset: Path, fmt: str) -> None:
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    expected = _values(ds)
    shards = len(ds.manifest.shards)
    assert ds.open_shards() == shards
    parents = [ds.reader(shard) for shard in range(shards)]
    kept = fmt in MAP_ONLY
    assert all(reader.inheritable == kept for reader in parents)
    assert _in_child(_check_kept, ds, parents, expected, kept, OPEN_FILES.held() if kept else None) == 0
    assert _values(ds) == expected and [ds.reader(shard) for shard in range(shards)] == parents
    ds.close()


def test_an_hdf5_reader_through_h5py_is_not_kept(tmp_path: Path, image_tree: Path) -> None:
    """Compressed HDF5 shards are read through h5py, whose state a fork must not share."""
    dst = tmp_path / "gz"
    shardkit.convert(str(image_tree), str(dst), format="hdf5", compression="gzip", samples_per_shard=40, quiet=True)
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(dst, decode=None)
    expected = [bytes(memoryview(ds[i][0])) for i in range(0, len(ds), 7)]
    ds.open_shards()
    parents = [ds.reader(shard) for shard in range(len(ds.manifest.shards))]
    assert not any(reader.inheritable for reader in parents)
    assert _in_child(_check_reopened_bytes, ds, parents, expected) == 0
    ds.close()


def _check_reopened_bytes(ds: Any, parents: List[Any], expected: List[bytes]) -> None:
    fresh = not any(slot is reader for slot, reader in zip(ds._handles.slots, parents))
    got = [bytes(memoryview(ds[i][0])) for i in range(0, len(ds), 7)]
    raise SystemExit(0 if fresh and got == expected and all(
        ds.reader(shard) is not reader for shard, reader in enumerate(parents)) else 3)


def test_open_shards_stops_at_max_open_shards(rows_dataset: Path) -> None:
    OPEN_FILES.close_all()
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=3) as ds:
        assert ds.open_shards() == 3
        assert sorted(ds._handles.ready) == [0, 1, 2]


def test_a_child_forked_while_a_thread_holds_the_lru_opens_its_own_readers(rows_dataset: Path, fmt: str) -> None:
    """A fork that finds a dataset's LRU busy in another thread cannot know it whole: the child
    forgets that dataset's readers (and opens them again) instead of keeping them."""
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    expected = _values(ds)
    ds.open_shards()
    parents = [ds.reader(shard) for shard in range(len(ds.manifest.shards))]
    with lru_held_by_another_thread(ds):
        code = _in_child(_check_kept, ds, parents, expected, False, None)
    assert code == 0
    ds.close()


def _collate(batch: List[Any]) -> List[Any]:
    return [(payload.tolist(), label) for payload, label in batch]


def test_forked_workers_after_open_shards_open_no_shard_file(rows_dataset: Path, fmt: str) -> None:
    """The shards move away after open_shards: non-persistent workers of two epochs (with
    shardkit.worker_init_fn, which sets aside only what a child must not use) still read every
    sample, through the map-only readers they kept (HDF5, PT) or through the row arena, whose
    published rows a child keeps without their reader (LMDB, one block of rows per shard)."""
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    expected = sorted(_values(ds))
    ds.open_shards()
    assert fmt in MAP_ONLY or all(base >= 0 for base in ds._handles.arena.bases)
    (rows_dataset / "shards").rename(rows_dataset / "elsewhere")
    try:
        for _ in range(2):
            assert sorted(sample for batch in _fork_loader(ds) for sample in batch) == expected
    finally:
        (rows_dataset / "elsewhere").rename(rows_dataset / "shards")
        ds.close()


def _fork_loader(ds: Any) -> Any:
    return torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=_collate,
                                       multiprocessing_context="fork", worker_init_fn=shardkit.worker_init_fn,
                                       sampler=torch.utils.data.RandomSampler(ds))


def test_forked_workers_open_again_what_a_fork_cannot_keep(tmp_path: Path, image_tree: Path) -> None:
    """LMDB records (encoded images: no rows, no arena) need their environment, which a fork
    cannot keep: workers open the shard again, and with the shards moved away fail naming it."""
    dst = tmp_path / "images"
    shardkit.convert(str(image_tree), str(dst), format="lmdb", samples_per_shard=40, quiet=True)
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(dst, decode=None)
    ds.open_shards()
    assert ds._handles.arena is None
    (dst / "shards").rename(dst / "elsewhere")
    try:
        loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=list,
                                             multiprocessing_context="fork", worker_init_fn=shardkit.worker_init_fn)
        with pytest.raises(shardkit.CorruptShardError, match=r"shard \d+"):
            list(loader)
    finally:
        (dst / "elsewhere").rename(dst / "shards")
        ds.close()


def _close_one_of_two(first: Any, second: Any, shards: int, expected: List[Any]) -> None:
    ok = len(OPEN_FILES) == shards
    first.close()
    ok = ok and len(OPEN_FILES) == shards and _values(second) == expected     # second still holds them
    second.close()
    raise SystemExit(0 if ok and len(OPEN_FILES) == 0 else 3)


def test_a_child_keeps_one_reference_per_dataset_that_holds_a_kept_reader(
        rows_dataset: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if fmt not in MAP_ONLY:
        pytest.skip("LMDB readers are not kept across a fork")
    monkeypatch.setattr(shards_module, "RUN_CHECK_BYTES", 0)     # shards open through readers, not placed
    OPEN_FILES.close_all()
    first = shardkit.open_dataset(rows_dataset, decode=None)
    second = shardkit.open_dataset(rows_dataset, decode=None)
    expected = _values(first)
    shards = first.open_shards()
    second.open_shards()
    assert _in_child(_close_one_of_two, first, second, shards, expected) == 0
    assert _values(first) == _values(second) == expected    # the parent's references are its own
    first.close()
    second.close()


def test_two_threads_forking_at_once_each_give_back_only_their_own_locks(rows_dataset: Path) -> None:
    """Two threads fork at once: the second's hook waits for the locks the first's holds, and each
    gives back what its own hook took. The hooks run here in that interleaving, as os.fork runs
    them; then a third thread must find every lock free."""
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    ds.open_shards()
    first_took, second_took, first_gave = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        OPEN_FILES._before_fork()
        first_took.set()
        second_took.wait(10)        # the second fork's hook has stored what it took (nothing)
        OPEN_FILES._after_fork_in_parent()
        first_gave.set()

    def second() -> None:
        first_took.wait(10)
        OPEN_FILES._before_fork()   # times out on the locks the first holds
        second_took.set()
        first_gave.wait(10)
        OPEN_FILES._after_fork_in_parent()
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    free: List[bool] = []

    def try_locks() -> None:
        for lock in (ds._handles.lock, OPEN_FILES._lock):
            free.append(lock.acquire(timeout=1))
            if free[-1]:
                lock.release()
    third = threading.Thread(target=try_locks)
    third.start()
    third.join(30)
    assert free == [True, True], "a lock taken for a fork was never given back"
    ds.close()


GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _kept_across_a_fork(name: str) -> bool:
    """What docs/training.md promises: uncompressed HDF5 shards of every version, .pt from version 3."""
    fmt, version = name.split("-")[:2]
    if fmt == "hdf5":
        return "gzip" not in name and "lzf" not in name
    return fmt == "pt" and version == "v3"


@pytest.mark.parametrize("name", sorted(path.name for path in GOLDEN.iterdir() if (path / "manifest.json").exists()))
def test_which_readers_a_fork_keeps_by_format_and_version(name: str) -> None:
    with shardkit.open_dataset(GOLDEN / name, decode=None) as ds:
        assert ds.reader(0).inheritable == _kept_across_a_fork(name)
