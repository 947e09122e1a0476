"""HDF5 shards open without file locks: a lock that cannot be taken (NFS, Lustre without
flock, or another process holding one) must not make an intact shard look corrupt."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

import shardkit


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_a_held_lock_does_not_stop_reading_or_verifying(writable_dataset: Path, fmt: str) -> None:
    dataset_dir = writable_dataset          # a fresh path: no reader of it is cached yet
    shards = sorted((dataset_dir / "shards").iterdir())
    holders = [os.open(shard, os.O_RDWR) for shard in shards]
    try:
        for fd in holders:      # what a writer (or a broken lock manager) holds: every lock taken
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        ds = shardkit.open_dataset(dataset_dir, decode=None)
        assert len(ds) == 120 and all(ds[index] is not None for index in range(0, 120, 16))
        report = shardkit.verify(str(dataset_dir), mode="deep", workers=1)
        assert report.ok, report.problems
    finally:
        for fd in holders:
            os.close(fd)
