"""A chunk is inflated whole on every read: a shard whose chunk is larger than its dataset, or
larger than the cap, is refused at open instead of costing hundreds of MiB per read."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptShardError
from shardkit.formats.hdf5_layout import MAX_CHUNK_BYTES
from tests.security.test_hdf5_self_contained import crafted


def huge_chunk_for_tiny_data(handle: h5py.File, dst: Path) -> None:
    """The few real bytes in one gzip chunk far larger than the dataset (under the byte cap)."""
    data = handle["data"][()]
    del handle["data"]
    handle.create_dataset("data", data=data, maxshape=(None,), chunks=(MAX_CHUNK_BYTES // 2,), compression="gzip")


def chunk_over_the_cap(handle: h5py.File, dst: Path) -> None:
    """A dataset as large as its one chunk, which is twice the cap (zeros: it compresses to KBs)."""
    size = 2 * MAX_CHUNK_BYTES
    data = np.zeros(size, dtype=np.uint8)
    data[:handle["data"].shape[0]] = handle["data"][()]
    del handle["data"]
    handle.create_dataset("data", data=data, chunks=(size,), compression="gzip", compression_opts=9)
    offsets = handle["offsets"][()]
    offsets[-1] = size
    handle["offsets"][...] = offsets


@pytest.mark.parametrize("change", [huge_chunk_for_tiny_data, chunk_over_the_cap])
def test_chunk_bombs_are_refused_at_open(tmp_path: Path, change) -> None:
    dst = crafted(tmp_path, change)
    assert (dst / "shards" / "shard-00000.h5").stat().st_size < MAX_CHUNK_BYTES // 8
    report = shardkit.verify(str(dst), mode="deep")
    assert [problem.kind for problem in report.problems] == ["structure"]
    assert "chunks may not exceed" in report.problems[0].message
    with pytest.raises(CorruptShardError, match="chunks may not exceed"):
        shardkit.open_dataset(dst)[0]
