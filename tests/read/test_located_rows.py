"""Rows located in their files (ShardFormat.locate, through checked.CheckedShards.locate): one dataset
gives one set of samples whatever the path. A shard whose record points at rows the format library
does not see is read through the library (its record no longer describes the file), or, when the
record was forged to describe it, every shardkit path reads the same rows and verify --deep reports
the disagreement; a swapped, foreign, linked or special file is never read."""
from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch.utils.data

import shardkit
from shardkit.formats.hdf5_locator import meta_crc32, parse, read_head
from shardkit.formats.locating import gaps_crc32
from shardkit.formats.pt_locator import _END, read_locator
from shardkit.sample_table import TABLE_NAME

from ..faults.crafting import forge_manifest, reseal
from .conftest import ROWS

ROW_BYTES = 8                               # two float32 features


def _every_path(dst: Path, **options: Any) -> List[List[Any]]:
    """Every sample through each way a dataset reads it: located rows (the arena), a small budget
    (each shard's own mapped rows), batches, checked reads, and DataLoader workers."""
    def values(ds: Any) -> List[Any]:
        return [(ds[i][0].tolist(), ds[i][1]) for i in range(len(ds))]
    with shardkit.open_dataset(dst, decode=None, **options) as ds, \
            shardkit.open_dataset(dst, decode=None, max_open_shards=1, **options) as small:
        batch = [(row.tolist(), label) for row, label in ds.__getitems__(list(range(len(ds))))]
        loader = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2,
                                             collate_fn=lambda b: [(r.tolist(), label) for r, label in b])
        workers = [sample for part in loader for sample in part]
        return [values(ds), values(small), batch, workers]


def _library_rows(dst: Path, shard: int) -> List[Any]:
    """Shard `shard`'s rows as the format's own library reads them (h5py, torch.load)."""
    manifest = shardkit.open_dataset(dst).manifest
    path = dst / manifest.shards[shard].path
    if manifest.format_name == "hdf5":
        import h5py
        with h5py.File(path, "r") as handle:
            return handle["data"][()].tolist()
    import torch
    data = torch.load(path, weights_only=True)["data"].numpy()
    return data.view("<f4").reshape(-1, 2).tolist()


def _point_hdf5_locator_at(path: Path, rows: bytes, describe: bool) -> None:
    """Append rows to an HDF5 shard and point its locator's data at them (CRC32 fixed); its metadata
    CRC32 is recomputed only when `describe` (a forgery that makes it describe the file again)."""
    data = bytearray(path.read_bytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        locator = parse(read_head(fd, str(path)), str(path), len(data))
    finally:
        os.close(fd)
    size = locator.chunk_bytes * len(locator.chunks)
    start = len(data)
    data += rows.ljust(size, b"\0")
    locator.chunks = np.arange(len(locator.chunks), dtype=np.int64) * locator.chunk_bytes + start
    locator.file_size = len(data)
    if describe:
        locator.meta_crc32 = meta_crc32(memoryview(bytes(data)), locator)
    encoded = locator.encode()
    data[:len(encoded)] = encoded
    path.write_bytes(bytes(data))


def _point_pt_locator_at(path: Path, rows: bytes, describe: bool) -> None:
    """Add an archive entry holding rows to a .pt shard (torch.load never reads it) and point its
    locator's data at it; the metadata CRC32 describes the new archive only when `describe`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        old = read_locator(fd, str(path), os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert old is not None
    locator = old[0]
    with zipfile.ZipFile(path, "a") as archive:
        name = archive.namelist()[0].split("/")[0] + "/extra"      # torch.load reads only what its pickle names
        archive.comment = b""
        archive.writestr(zipfile.ZipInfo(name), rows, compress_type=zipfile.ZIP_STORED)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)
    locator.tables["data"] = (info.header_offset + 30 + name_length + extra_length, len(rows))
    comment = len(locator.encode())
    locator.file_size = len(data) + comment
    length = struct.pack("<H", comment)
    meta = zlib.crc32(length, gaps_crc32(memoryview(data), locator.tables.values(), 0, len(data) - 2))
    locator.meta_crc32 = meta if describe else meta ^ 1
    path.write_bytes(data[:-2] + length + locator.encode())
    assert _END.unpack_from(path.read_bytes(), len(data) - _END.size)[-1] == comment


CRAFT = {"hdf5": _point_hdf5_locator_at, "pt": _point_pt_locator_at}


@pytest.fixture()
def big_rows(tmp_path: Path, fmt: str) -> Path:
    """Two shards of 9,000 rows: more bytes than a located shard's rows are checked for as it opens
    (checked.CHECKED_ROWS_BYTES), so only the locator's own checks stand between a read and them."""
    csv = tmp_path / "big.csv"
    csv.write_text("a,b,label\n" + "".join(f"{i},{-i},c{i % 3}\n" for i in range(18000)))
    dst = tmp_path / "big"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=9000, order="source",
                     quiet=True)
    return dst


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_a_locator_that_no_longer_describes_its_file_is_not_followed(big_rows: Path, fmt: str) -> None:
    """Extra rows in the file and a locator pointing at them, its metadata CRC32 stale: every path
    reads the rows the format library reads, never the extra ones (default and checked reads)."""
    library = _library_rows(big_rows, 0)
    other = np.full((len(library), 2), 7.0, dtype="<f4").tobytes()
    shard = big_rows / shardkit.open_dataset(big_rows).manifest.shards[0].path
    CRAFT[fmt](shard, other, describe=False)
    reseal(big_rows)
    for checks in (False, True):
        for values in _every_path(big_rows, verify_checksums=checks):
            assert [row for row, _ in values[:len(library)]] == library
    assert shardkit.verify(str(big_rows), mode="deep").ok


@pytest.mark.parametrize("fmt", ["hdf5", "pt"])
def test_a_forged_locator_is_read_alike_by_every_path_and_reported_by_deep_verify(rows_dataset: Path,
                                                                                  fmt: str) -> None:
    """The same, with the metadata CRC32 forged to describe the file: shardkit's paths all read the
    extra rows (one set of samples), and verify --deep names the shard whose locator disagrees with
    its library."""
    library = _library_rows(rows_dataset, 0)
    other = np.full((len(library), 2), 7.0, dtype="<f4")
    shard = rows_dataset / shardkit.open_dataset(rows_dataset).manifest.shards[0].path
    CRAFT[fmt](shard, other.tobytes(), describe=True)
    reseal(rows_dataset)
    paths = _every_path(rows_dataset)
    assert all(values == paths[0] for values in paths)
    assert [row for row, _ in paths[0][:len(library)]] == other.tolist()
    report = shardkit.verify(str(rows_dataset), mode="deep")
    assert [(problem.kind, problem.shard) for problem in report.problems][:1] == [("structure", shard.relative_to(
        rows_dataset).as_posix())] and "locator disagrees" in report.problems[0].message


#: Ways a dataset's shards first open: one read at a time, a batch (shards checked together), prepare.
OPENINGS = {"reads": lambda ds: [ds[i] for i in range(len(ds))],
            "batch": lambda ds: ds.__getitems__(list(range(len(ds)))),
            "open_shards": lambda ds: ds.open_shards()}


@pytest.mark.parametrize("opening", sorted(OPENINGS))
def test_small_located_rows_that_fail_their_crc32s_are_read_through_a_reader(rows_dataset: Path,
                                                                             opening: str) -> None:
    """A flipped byte in shard 1's rows: located rows of a small shard are checked against their
    CRC32s as they open (alone or with the other shards of a batch), so the shard is read through
    its reader instead (which names the damaged row when reads are checked), while every other
    shard's rows are read where they lie."""
    from shardkit.formats import get_format
    manifest = shardkit.open_dataset(rows_dataset).manifest
    shard = rows_dataset / manifest.shards[1].path
    fd = os.open(shard, os.O_RDONLY)
    try:                                    # shard 1's first row, where its format says it lies
        location = get_format(manifest.format_name).locate(fd, manifest.shards[1].size, str(shard), manifest.schema)
    finally:
        os.close(fd)
    assert location is not None
    data = bytearray(shard.read_bytes())
    data[location.rows.offset + 1] ^= 0x40
    shard.write_bytes(bytes(data))
    table = (rows_dataset / TABLE_NAME).read_bytes()
    entry = json.loads((rows_dataset / "manifest.json").read_text())["sample_table"]
    reseal(rows_dataset)
    (rows_dataset / TABLE_NAME).write_bytes(table)
    forge_manifest(rows_dataset, lambda data: data.update(sample_table=entry))
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        OPENINGS[opening](ds)
        info = ds.shard_cache.info()
        assert 1 not in info.placed and info.readers == (1,) and len(info.placed) == len(ds.manifest.shards) - 1
    with shardkit.open_dataset(rows_dataset, decode=None, verify_checksums=True) as ds:
        with pytest.raises(shardkit.CorruptSampleError, match="shard-00001.*sample 0.*CRC32"):
            ds[5]
        assert ds[6][1] == 0


@pytest.mark.parametrize("change", ["swap", "foreign"])
def test_a_shard_swapped_or_of_another_conversion_is_refused(rows_dataset: Path, tmp_path: Path, fmt: str,
                                                             change: str) -> None:
    """Shards 1 and 2 hold the same number of rows, so only their contents tell them apart; a shard
    of another conversion of the same rows carries another dataset's identity."""
    manifest = shardkit.open_dataset(rows_dataset).manifest
    target = rows_dataset / manifest.shards[2].path
    if change == "swap":
        shutil.copyfile(rows_dataset / manifest.shards[1].path, target)
        expected: Any = shardkit.CorruptShardError
    else:
        other, csv = tmp_path / "other", tmp_path / "again.csv"
        shutil.copyfile(rows_dataset.parent / "rows.csv", csv)
        shardkit.convert(str(csv), str(other), format=fmt, label_column="label", samples_per_shard=5,
                         order="source", quiet=True)
        shutil.copyfile(other / manifest.shards[2].path, target)
        expected = shardkit.ForeignShardError
    table = (rows_dataset / TABLE_NAME).read_bytes()
    entry = json.loads((rows_dataset / "manifest.json").read_text())["sample_table"]
    reseal(rows_dataset)                    # the manifest agrees with the files; the sample table is the old one
    (rows_dataset / TABLE_NAME).write_bytes(table)
    forge_manifest(rows_dataset, lambda data: data.update(sample_table=entry))
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        assert ds[0][1] == 0
        with pytest.raises(expected, match="shard-00002"):
            ds[11]


@pytest.mark.parametrize("how", ["link", "fifo"])
def test_links_and_special_files_are_never_opened(rows_dataset: Path, how: str) -> None:
    manifest = shardkit.open_dataset(rows_dataset).manifest
    target = rows_dataset / manifest.shards[3].path
    keep = target.with_name("kept")
    target.rename(keep)
    if how == "link":
        target.symlink_to(keep)
    else:
        os.mkfifo(target)
    try:
        with shardkit.open_dataset(rows_dataset, decode=None) as ds:
            assert ds[0][1] == 0
            with pytest.raises(shardkit.CorruptShardError, match="shard-00003"):
                ds[16]
    finally:
        target.unlink()
        keep.rename(target)


def test_located_rows_and_tables_are_the_librarys(rows_dataset: Path, fmt: str) -> None:
    """ShardFormat.locate, for every shard: the rows, labels and CRC32s at the places it names are
    the ones the format's reader gives (the reader for LMDB, the library path for HDF5 and PT)."""
    from shardkit.formats import get_format, recorded_options
    from shardkit.formats.hdf5_reader import HDF5Reader
    from shardkit.formats.pt_reader import PTReader
    manifest = shardkit.open_dataset(rows_dataset).manifest
    form = get_format(fmt)
    options = recorded_options(form, manifest, str(rows_dataset))
    for entry in manifest.shards:
        path = str(rows_dataset / entry.path)
        fd = os.open(path, os.O_RDONLY)
        try:
            location = form.locate(fd, entry.size, path, manifest.schema, options)
            assert location is not None and location.count == entry.num_samples
            where = location.rows
            rows = os.pread(fd, where.row_count * where.row_dtype.itemsize, where.offset)
            labels = np.frombuffer(os.pread(fd, location.labels[1], location.labels[0]), "<i8")
            crcs = np.frombuffer(os.pread(fd, location.crcs[1], location.crcs[0]), location.crc_dtype)
        finally:
            os.close(fd)
        reader = {"hdf5": lambda: HDF5Reader(path, manifest.schema, located=False),
                  "pt": lambda: PTReader(path, manifest.schema, located=False),
                  "lmdb": lambda: form.open_reader(path, manifest.schema, options)}[fmt]()
        try:
            assert rows == b"".join(np.ascontiguousarray(reader.read(i).payload).tobytes() for i in range(len(reader)))
            assert labels.tolist() == reader.labels().tolist()
            assert crcs.tolist() == [reader.read(i).crc32 for i in range(len(reader))]
        finally:
            reader.close()
    assert ROWS == manifest.num_samples
