"""The checks of a read hold on every path: one sample at a time, batches read sample by sample and
batches grouped by shard (16 or more samples of one shard), rows located in their files and
payloads read through a reader; a shard whose record disagrees with the manifest is refused; a shard
set aside and damaged meanwhile is checked again when it reopens; open_shards keeps to the budget."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest

import shardkit
from shardkit.formats import get_format
from shardkit.formats.hdf5_locator import parse, read_head

from ..faults.crafting import reseal
from ..faults.helpers import make_tiny_tree
from .conftest import PER_SHARD, ROWS


def _flip_in_place(path: Path, payload: bytes) -> None:
    """Flip a bit in the middle of the one copy of payload in the file (which must hold just one)."""
    data = bytearray(path.read_bytes())
    assert data.count(payload) == 1, "the payload must be unique in its shard"
    data[data.find(payload) + len(payload) // 2] ^= 0x08
    path.write_bytes(bytes(data))


def _batches(ds: Any, indices: List[int]) -> List[List[int]]:
    """The same indices as one batch grouped by shard (all of them) and as small groups (one each)."""
    return [indices, [indices[0]], indices[:3]]


@pytest.fixture()
def big_images(tmp_path: Path, fmt: str) -> Path:
    """48 images in shards of 24: a batch of a whole shard is read in one pass (read_many)."""
    make_tiny_tree(tmp_path / "src", 48, seed=8)
    dst = tmp_path / "dst"
    shardkit.convert(str(tmp_path / "src"), str(dst), format=fmt, samples_per_shard=24, order="source", quiet=True)
    return dst


def test_a_damaged_payload_fails_its_check_on_every_batch_shape(big_images: Path) -> None:
    """verify_checksums=True: a flipped byte in sample 5's payload is a CorruptSampleError naming it
    however it is read; the grouped path (a whole shard of 24 in one batch) included."""
    with shardkit.open_dataset(big_images, decode=None) as ds:
        payload = bytes(memoryview(ds[5][0]))
        shard = big_images / ds.manifest.shards[0].path
    _flip_in_place(shard, payload)
    with shardkit.open_dataset(big_images, decode=None, verify_checksums=True) as ds:
        with pytest.raises(shardkit.CorruptSampleError, match="shard-00000.*sample 5.*CRC32"):
            ds[5]
        for batch in ([5] + list(range(6, 24)) + list(range(0, 5)), [5, 30], list(range(48))):
            with pytest.raises(shardkit.CorruptSampleError) as caught:
                ds.__getitems__(batch)
            assert (caught.value.index, caught.value.global_index) == (5, 5)
        assert len(ds.__getitems__(list(range(6, 30)))) == 24       # the others still read


def test_a_damaged_row_fails_its_check_in_grouped_batches(rows_dataset: Path) -> None:
    """Rows read from the arena: a batch grouped by shard checks each row as one read does."""
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        row = ds[7][0].tobytes()
        shard = rows_dataset / ds.manifest.shards[1].path
    data = bytearray(shard.read_bytes())
    at = [index for index in range(len(data)) if data.startswith(row, index)]
    for index in at:            # every copy (LMDB keeps stale ones): the one read is among them
        data[index + 2] ^= 0x10
    shard.write_bytes(bytes(data))
    with shardkit.open_dataset(rows_dataset, decode=None, verify_checksums=True, max_open_shards=100) as ds:
        for batch in (list(range(ROWS)), [7] * 20, [7]):
            with pytest.raises(shardkit.CorruptSampleError) as caught:
                ds.__getitems__(batch)
            assert (caught.value.index, caught.value.global_index) == (2, 7)


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_a_locator_whose_count_disagrees_with_the_manifest_is_refused(rows_dataset: Path) -> None:
    """A locator rewritten to claim one sample fewer, its CRC32 and metadata CRC32 made to describe
    the file: the located path refuses the shard for its count, naming it."""
    shard = rows_dataset / shardkit.open_dataset(rows_dataset).manifest.shards[2].path
    data = bytearray(shard.read_bytes())
    fd = os.open(shard, os.O_RDONLY)
    try:
        locator = parse(read_head(fd, str(shard)), str(shard), len(data))
    finally:
        os.close(fd)
    locator.count -= 1
    locator.tables["labels"] = (locator.tables["labels"][0], 8 * locator.count)
    locator.tables["crc32"] = (locator.tables["crc32"][0], 4 * locator.count)
    locator.data_bytes -= locator.row_bytes
    encoded = locator.encode()
    data[:len(encoded)] = encoded
    shard.write_bytes(bytes(data))
    _refresh_locator(shard)
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        assert ds[0][1] == 0
        with pytest.raises(shardkit.CorruptShardError, match=f"shard-00002.*holds {PER_SHARD - 1} samples"):
            ds[2 * PER_SHARD]


def test_a_shard_set_aside_and_damaged_is_checked_when_it_reopens(rows_dataset: Path) -> None:
    """Under a budget of 1 shard 0 is closed once shard 1 is read; damaged meanwhile, it is read
    again through every check (its located rows fail their CRC32s, its reader names the row)."""
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=1, verify_checksums=True) as ds:
        row = ds[0][0].tobytes()
        ds[PER_SHARD]                               # shard 1 takes the one place
        assert ds.shard_cache.info().open == (1,)
        shard = rows_dataset / ds.manifest.shards[0].path
        fd = os.open(shard, os.O_RDONLY)
        try:
            location = get_format(ds.manifest.format_name).locate(fd, ds.manifest.shards[0].size, str(shard),
                                                                  ds.manifest.schema)
        finally:
            os.close(fd)
        assert location is not None
        data = bytearray(shard.read_bytes())
        assert data[location.rows.offset:location.rows.offset + len(row)] == row
        data[location.rows.offset] ^= 0x01
        with open(shard, "r+b") as handle:          # in place: the same file, no rename to notice
            handle.write(bytes(data))
        with pytest.raises(shardkit.CorruptSampleError, match="shard-00000.*sample 0"):
            ds[0]


def test_open_shards_keeps_to_the_budget(rows_dataset: Path) -> None:
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=3) as ds:
        assert ds.open_shards() == 3
        info = ds.shard_cache.info()
        assert info.open == (0, 1, 2) and not info.placed        # no arena: the shards do not all fit
        assert [ds[i][1] for i in range(ROWS)] == [i % 3 for i in range(ROWS)]
        assert len(ds.shard_cache.info().open) == 3


def test_deep_verify_decodes_every_image(big_images: Path) -> None:
    """A payload that is not an image, with CRC32s and tables resealed to match it: only decoding
    finds it, and verify --deep does (full does not)."""
    with shardkit.open_dataset(big_images, decode=None) as ds:
        payload = bytes(memoryview(ds[9][0]))
        shard = big_images / ds.manifest.shards[0].path
    data = bytearray(shard.read_bytes())
    at = data.find(payload)
    garbage = np.random.default_rng(0).integers(0, 256, len(payload), dtype=np.uint8).tobytes()
    data[at:at + len(payload)] = garbage
    shard.write_bytes(bytes(data))
    _reseal_crc(big_images, 9, garbage)
    assert shardkit.verify(str(big_images), mode="full").ok
    report = shardkit.verify(str(big_images), mode="deep")
    assert [(p.kind, p.index) for p in report.problems] == [("sample", 9)], report.problems
    assert "does not decode" in report.problems[0].message


def _reseal_crc(dst: Path, index: int, payload: bytes) -> None:
    """Rewrite sample index's stored CRC32 in its shard to match payload (a forged shard), then the
    manifest and sample table to match the shard."""
    import zlib
    with shardkit.open_dataset(dst, decode=None) as ds:
        old = ds.read_encoded(index).crc32
        shard = dst / ds.manifest.shards[ds.locate(index)[0]].path
    data = bytearray(shard.read_bytes())
    new = zlib.crc32(payload)
    for width, order in ((4, "little"), (8, "little")):
        was = old.to_bytes(width, order)
        if data.count(was) == 1:
            at = data.find(was)
            data[at:at + width] = new.to_bytes(width, order)
            break
    else:
        pytest.skip("the stored CRC32 is not unique in the shard")
    shard.write_bytes(bytes(data))
    _refresh_locator(shard)
    reseal(dst)


def _refresh_locator(shard: Path) -> None:
    """Recompute a located HDF5 shard's metadata CRC32 after an edit inside a table (none elsewhere)."""
    if shard.suffix != ".h5":
        return
    from shardkit.formats.hdf5_locator import meta_crc32
    data = bytearray(shard.read_bytes())
    fd = os.open(shard, os.O_RDONLY)
    try:
        raw = read_head(fd, str(shard))
    finally:
        os.close(fd)
    if raw is None:
        return
    locator = parse(raw, str(shard), len(data))
    locator.meta_crc32 = meta_crc32(memoryview(bytes(data)), locator)
    encoded = locator.encode()
    data[:len(encoded)] = encoded
    shard.write_bytes(bytes(data))
