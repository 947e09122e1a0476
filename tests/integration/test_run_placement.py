"""A small shard placed in the row arena straight from its file (ShardRecords._place_run): no reader
is opened, and its rows are served only once they, its labels, its identity and its count match the
dataset. Whatever does not match is left to the reader path, which names it; rows that fail their
CRC32s are refused outright, since no reader would check them."""
from __future__ import annotations

import os
import shutil
import sys
import zlib
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptSampleError, CorruptShardError, ForeignShardError
from shardkit.formats import get_format
from shardkit.manifest import load_manifest
from shardkit.read.openfiles import OPEN_FILES
from shardkit.sample_table import TABLE_NAME, SampleTable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the arena is Linux only")

PER_SHARD = 7
ROWS = 120          # 17 shards of 7 rows and one of 1


@pytest.fixture()
def table(tmp_path: Path, fmt: str) -> Path:
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,c,label\n" + "".join(f"{i},{i * 0.5},{-i},c{i % 3}\n" for i in range(ROWS)))
    dst = tmp_path / "ds"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=PER_SHARD, quiet=True)
    OPEN_FILES.close_all()
    return dst


def _runs(dst: Path) -> List[Dict[str, int]]:
    """Where each shard's rows and labels lie, as its format's row_run says."""
    manifest = load_manifest(dst)
    fmt = get_format(manifest.format_name)
    found = []
    for entry in manifest.shards:
        path = str(dst / entry.path)
        fd = os.open(path, os.O_RDONLY)
        try:
            run = fmt.row_run(fd, entry.size, path, manifest.schema)
        finally:
            os.close(fd)
        assert run is not None
        found.append({"rows": run.rows.offset, "bytes": run.rows.row_count * run.rows.row_dtype.itemsize,
                      "labels": run.labels_offset, "size": entry.size})
    return found


def _expected(dst: Path) -> list:
    """Every sample as the reader path gives it (verify_checksums="full" never places from a run)."""
    with shardkit.open_dataset(dst, decode=None, verify_checksums="full") as slow:
        assert not slow._runs_first
        return [(np.array(row), label) for row, label in (slow[i] for i in range(len(slow)))]


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x01]))


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_small_shards_are_read_from_their_files_without_a_reader(table: Path, fmt: str) -> None:
    expected = _expected(table)
    with shardkit.open_dataset(table, decode=None) as ds:
        order = np.random.default_rng(0).permutation(len(ds))
        got = {int(i): ds[int(i)] for i in order}
        handles = ds._handles
        assert len(handles.ready) == 0 and handles.arena is not None      # no reader: every shard placed
        assert all(base >= 0 for base in handles.arena.bases)
        for i, (row, label) in got.items():
            assert np.array_equal(row, expected[i][0]) and label == expected[i][1]
            assert row.base is handles.arena.rows or row.base is handles.arena.rows.base
    with shardkit.open_dataset(table, decode=None) as ds:
        assert ds.open_shards() == len(ds.shard_starts) - 1 and len(ds._handles.ready) == 0


@pytest.mark.parametrize("fmt", ["hdf5", "pt", "lmdb"])
def test_the_sample_table_gives_each_shards_run_crc32(table: Path, fmt: str) -> None:
    """Shards of 7 rows and a last one of 1: the run CRC32 combined from the table's row CRC32s is
    zlib's CRC32 of the rows back to back."""
    manifest = load_manifest(table)
    assert manifest.sample_table is not None
    starts = np.concatenate([[0], np.cumsum(manifest.shards.num_samples)])
    crcs = SampleTable(str(table), manifest.sample_table).run_crcs(starts, manifest.schema.sample_nbytes)
    with shardkit.open_dataset(table, decode=None, verify_checksums="full") as ds:
        for shard in range(len(manifest.shards)):
            rows = np.stack([np.asarray(ds[i][0]) for i in range(int(starts[shard]), int(starts[shard + 1]))])
            assert int(crcs[shard]) == zlib.crc32(rows.tobytes())
    assert list(manifest.shards.num_samples[-2:]) == [PER_SHARD, ROWS % PER_SHARD]


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_a_flipped_row_byte_is_refused_naming_its_sample(table: Path, fmt: str) -> None:
    runs, shard, row = _runs(table), 3, 5
    manifest = load_manifest(table)
    row_bytes, expected = runs[shard]["bytes"] // PER_SHARD, _expected(table)
    _flip(table / manifest.shards[shard].path, runs[shard]["rows"] + row * row_bytes + 1)
    with shardkit.open_dataset(table, decode=None) as ds:
        with pytest.raises(CorruptSampleError) as caught:
            ds[shard * PER_SHARD]        # another row of the shard: the shard's rows are checked whole
        assert caught.value.global_index == shard * PER_SHARD + row and caught.value.index == row
        assert "CRC32" in str(caught.value) and manifest.shards[shard].path in str(caught.value)
        assert ds._handles.arena is not None and ds._handles.arena.bases[shard] < 0
        row_, label = ds[0]         # the other shards read on
        assert np.array_equal(row_, expected[0][0]) and label == expected[0][1]


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_with_checked_reads_only_the_flipped_row_fails(table: Path, fmt: str) -> None:
    """verify_checksums=True checks every read: the shard opens through its reader as before, and
    only the damaged row is refused."""
    runs, shard, row = _runs(table), 3, 5
    manifest = load_manifest(table)
    row_bytes, expected = runs[shard]["bytes"] // PER_SHARD, _expected(table)
    _flip(table / manifest.shards[shard].path, runs[shard]["rows"] + row * row_bytes + 1)
    with shardkit.open_dataset(table, decode=None, verify_checksums=True) as ds:
        for local in range(PER_SHARD):
            index = shard * PER_SHARD + local
            if local == row:
                with pytest.raises(CorruptSampleError) as caught:
                    ds[index]
                assert caught.value.global_index == index
            else:
                got, label = ds[index]
                assert np.array_equal(got, expected[index][0]) and label == expected[index][1]
        assert shard in ds._handles.ready


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_a_shard_swapped_for_another_of_its_size_is_refused(table: Path, fmt: str) -> None:
    """Two shards of one dataset have the same identity and count: only their contents tell them
    apart. A shard copied over another of the same size is never read as that one."""
    manifest = load_manifest(table)
    sizes = [entry.size for entry in manifest.shards[:-1]]
    pairs = [(a, b) for a in range(len(sizes)) for b in range(a + 1, len(sizes)) if sizes[a] == sizes[b]]
    assert pairs, sizes
    target, source = pairs[0]
    shutil.copyfile(table / manifest.shards[source].path, table / manifest.shards[target].path)
    with shardkit.open_dataset(table, decode=None) as ds:
        with pytest.raises(CorruptShardError, match="differ from the dataset's sample table"):
            ds[target * PER_SHARD]
        assert ds._handles.arena is None or ds._handles.arena.bases[target] < 0


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_a_changed_label_in_the_sample_table_is_refused(table: Path, fmt: str) -> None:
    """The rows match the table's CRC32s, the label does not match the shard's own: the reader
    path, which compares all of a shard's tables, refuses the shard."""
    label_offset = (2 * PER_SHARD + 4) * 12         # sample 18's label (int64) in its 12-byte table row
    _flip(table / TABLE_NAME, label_offset)
    with shardkit.open_dataset(table, decode=None) as ds:
        ds[0]
        with pytest.raises(CorruptShardError, match="labels differ"):
            ds[2 * PER_SHARD]


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_with_readahead_off_small_shards_open_through_their_readers(table: Path, fmt: str) -> None:
    """A dataset larger than RAM (readahead off) reads only the pages a row needs: checking a
    shard's whole run when it opens would read them all."""
    with shardkit.open_dataset(table, decode=None, readahead=False) as ds:
        ds[0]
        assert len(ds._handles.ready) == 1


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_a_shard_of_another_conversion_of_the_same_rows_is_refused(table: Path, tmp_path: Path, fmt: str) -> None:
    """Same rows, labels and size, another dataset's identity: a foreign shard is never read."""
    longer = tmp_path / "longer.csv"
    longer.write_text((tmp_path / "rows.csv").read_text() + "".join(f"{i},0.5,1,c0\n" for i in range(PER_SHARD)))
    again = tmp_path / "again"
    shardkit.convert(str(longer), str(again), format=fmt, label_column="label",
                     samples_per_shard=PER_SHARD, quiet=True)
    manifest = load_manifest(table)
    assert load_manifest(again).dataset_id != manifest.dataset_id
    assert (again / manifest.shards[2].path).stat().st_size == manifest.shards[2].size
    shutil.copyfile(again / manifest.shards[2].path, table / manifest.shards[2].path)
    with shardkit.open_dataset(table, decode=None) as ds:
        ds[0]
        with pytest.raises(ForeignShardError):
            ds[2 * PER_SHARD]


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
@pytest.mark.parametrize("how", ["outside copy", "fifo", "linked folder"])
def test_links_and_special_files_are_never_placed(table: Path, tmp_path: Path, fmt: str, how: str) -> None:
    """The quick open through the held shards/ folder follows no link and waits on no FIFO: a
    shard replaced so, or a shards folder linked out of DST, is refused as the reader path refuses it."""
    manifest = load_manifest(table)
    shard = table / manifest.shards[1].path
    if how == "outside copy":
        shutil.copyfile(shard, tmp_path / "elsewhere.bin")
        shard.unlink()
        shard.symlink_to(tmp_path / "elsewhere.bin")
    elif how == "fifo":
        shard.unlink()
        os.mkfifo(shard)
    else:
        (table / "shards").rename(tmp_path / "outside")
        (table / "shards").symlink_to(tmp_path / "outside", target_is_directory=True)
    with shardkit.open_dataset(table, decode=None) as ds:
        with pytest.raises(shardkit.ShardkitError, match="regular file|lies outside|symbolic link"):
            ds[PER_SHARD]
        arena = ds._handles.arena
        assert arena is None or arena.bases[1] < 0


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_without_an_arena_each_shard_is_opened_once_through_its_reader(table: Path, fmt: str) -> None:
    """A budget below the shard count keeps no arena: a miss goes straight to the reader path,
    without first opening the file for a placement that cannot happen."""
    expected = _expected(table)
    with shardkit.open_dataset(table, decode=None, max_open_shards=4) as ds:
        for i in np.random.default_rng(1).permutation(len(ds)).tolist():
            row, label = ds[i]
            assert np.array_equal(row, expected[i][0]) and label == expected[i][1]
        assert ds._handles.arena is None and ds._folder is None
