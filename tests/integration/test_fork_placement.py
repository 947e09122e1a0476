"""A fork places every shard it can in the parent's row arena first (ShardRecords.place_before_fork):
DataLoader workers, a new pair each epoch when not persistent, then read every sample without
opening a shard, from a parent that never read one, and the parent holds no shard descriptor."""
from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch.utils.data

import shardkit
from shardkit.manifest import load_manifest
from shardkit.read.openfiles import OPEN_FILES

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the arena is Linux only")

ROWS, PER_SHARD = 90, 6


@pytest.fixture()
def table(tmp_path: Path, fmt: str) -> Path:
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},{i * 0.25},c{i % 3}\n" for i in range(ROWS)))
    dst = tmp_path / "ds"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=PER_SHARD, quiet=True)
    OPEN_FILES.close_all()
    return dst


def _collate(batch: List[Any]) -> List[Any]:
    return [(payload.tolist(), label) for payload, label in batch]


def _expected(dst: Path) -> List[Any]:
    """Every sample through readers only (verify_checksums="full": no arena, no fork placement)."""
    with shardkit.open_dataset(dst, decode=None, verify_checksums="full") as slow:
        return sorted((slow[i][0].tolist(), slow[i][1]) for i in range(len(slow)))


def _loader(ds: Any) -> Any:
    return torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=_collate,
                                       multiprocessing_context="fork", sampler=torch.utils.data.RandomSampler(ds))


def _shard_descriptors(dst: Path) -> List[str]:
    """The files under DST/shards this process holds open (the held folder itself aside)."""
    shards = os.path.realpath(dst / "shards")
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(shards + os.sep):
            found.append(target)
    return found


@pytest.mark.parametrize("fmt", ["hdf5", "pt", "lmdb"])
def test_workers_forked_from_a_parent_that_never_read_open_no_shard(table: Path, fmt: str) -> None:
    """The shards move away once the first epoch's workers are forked: they, and the next epoch's,
    still read every sample, from the rows the fork placed in the parent's arena."""
    expected = _expected(table)
    ds = shardkit.open_dataset(table, decode=None)
    shards = len(load_manifest(table).shards)
    try:
        for epoch in range(2):
            batches = iter(_loader(ds))      # forks the workers
            if epoch == 0:
                (table / "shards").rename(table / "elsewhere")
            assert sorted(sample for batch in batches for sample in batch) == expected
        handles = ds._handles
        assert handles.arena is not None and sum(base >= 0 for base in handles.arena.bases) == shards
        assert len(handles.ready) == 0 and OPEN_FILES.held() == 0     # no reader left open in the parent
        assert _shard_descriptors(table) == []
    finally:
        (table / "elsewhere").rename(table / "shards")
        ds.close()


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_a_fork_places_once_and_never_a_closed_dataset(table: Path, fmt: str) -> None:
    ds = shardkit.open_dataset(table, decode=None)
    shards = len(load_manifest(table).shards)
    try:
        assert ds.place_before_fork() == shards
        assert ds.place_before_fork() == 0              # done: the next forks cost nothing
        ds.close()
        assert ds._handles.arena is None
        assert ds.place_before_fork() == 0 and ds._handles.arena is None    # a fork does not reopen it
        assert ds.open_shards() == shards               # its owner can
    finally:
        ds.close()
    closed = shardkit.open_dataset(table, decode=None)
    closed.close()
    assert closed.place_before_fork() == 0 and _shard_descriptors(table) == []


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb"])
def test_a_dataset_whose_shards_do_not_fit_its_budget_places_nothing(table: Path, fmt: str) -> None:
    """Shards coming and going through a small budget get no arena: a fork opens none of them."""
    ds = shardkit.open_dataset(table, decode=None, max_open_shards=3)
    try:
        assert ds.place_before_fork() == 0
        assert ds._handles.arena is None and len(ds._handles.ready) == 0 and _shard_descriptors(table) == []
    finally:
        ds.close()


def _flip_row_byte(dst: Path, shard: int) -> None:
    """Flip one byte of a shard's first row, where its format's row_run says the rows lie."""
    from shardkit.formats import get_format
    manifest = load_manifest(dst)
    entry = manifest.shards[shard]
    path = dst / entry.path
    fd = os.open(path, os.O_RDONLY)
    try:
        run = get_format(manifest.format_name).row_run(fd, entry.size, str(path), manifest.schema)
    finally:
        os.close(fd)
    assert run is not None
    with open(path, "r+b") as handle:
        handle.seek(run.rows.offset)
        byte = handle.read(1)
        handle.seek(run.rows.offset)
        handle.write(bytes([byte[0] ^ 0x01]))


def _read_all(ds: Any, result: Any) -> None:
    try:
        for index in range(len(ds)):
            ds[index]
        result.put("read")
    except shardkit.CorruptSampleError as exc:
        result.put(str(exc))


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_a_damaged_shard_does_not_stop_the_fork_and_its_reads_fail_naming_it(table: Path, fmt: str) -> None:
    _flip_row_byte(table, 4)
    ds = shardkit.open_dataset(table, decode=None)
    try:
        context = multiprocessing.get_context("fork")
        result = context.Queue()
        child = context.Process(target=_read_all, args=(ds, result))
        child.start()               # the fork places every other shard and goes on
        message = result.get(timeout=60)
        child.join(60)
        bases = ds._handles.arena.bases
        assert bases[4] == -1 and all(base >= 0 for shard, base in enumerate(bases) if shard != 4)
        assert "fails its CRC32 check" in message and "shard-00004" in message
        assert f"global index {4 * PER_SHARD}" in message
        assert [ds[i] for i in range(4 * PER_SHARD)]        # the shards before it read in the parent
    finally:
        ds.close()


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_reads_after_the_fork_in_the_parent_are_the_same(table: Path, fmt: str) -> None:
    expected = _expected(table)
    ds = shardkit.open_dataset(table, decode=None)
    try:
        ds.place_before_fork()
        order = np.random.default_rng(1).permutation(len(ds)).tolist()
        assert sorted((ds[i][0].tolist(), ds[i][1]) for i in order) == expected
        assert ds.key(0) is not None        # a key needs the reader: opened on demand over the placed rows
        assert sorted((ds[i][0].tolist(), ds[i][1]) for i in order) == expected
    finally:
        ds.close()
