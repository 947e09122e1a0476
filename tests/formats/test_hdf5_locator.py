"""HDF5 format version 3: readers open a shard through the locator in its userblock, with the same
results as through h5py, and refuse a locator that is damaged or points outside the file."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import h5py
import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptShardError
from shardkit.formats import get_format
from shardkit.formats import hdf5_layout
from shardkit.formats.hdf5_reader import HDF5Reader
from shardkit.formats.hdf5_locator import Locator, meta_crc32, parse, read_head
from shardkit.records import Encoded
from shardkit.schema import SampleSchema
from tests.faults.crafting import reseal
from tests.security.crafted import rewrite_shard
from tests.formats.shard_helpers import payload_bytes, sized_samples, trace_peaks, write_shard

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
V3 = sorted(path for path in GOLDEN.glob("hdf5-v3*") if (path / "manifest.json").is_file())
BYTES = SampleSchema(kind="image")


def same_samples(path: Path, schema: SampleSchema) -> None:
    """The located reader gives exactly what the h5py reader gives."""
    fast, slow = HDF5Reader(str(path), schema), HDF5Reader(str(path), schema, located=False)
    try:
        assert (len(fast), fast.dataset_id) == (len(slow), slow.dataset_id)
        assert fast.labels().tolist() == slow.labels().tolist()
        for index in range(len(slow)):
            one, other = fast.read(index), slow.read(index)
            assert payload_bytes(one.payload) == payload_bytes(other.payload)
            assert (one.label, one.crc32, fast.key(index)) == (other.label, other.crc32, slow.key(index))
        many = fast.read_many(list(range(len(slow)))[::-1])
        assert [payload_bytes(one.payload) for one in many] == \
            [payload_bytes(slow.read(index).payload) for index in range(len(slow))][::-1]
    finally:
        fast.close()
        slow.close()


@pytest.mark.parametrize("golden", V3, ids=[path.name for path in V3])
def test_located_reads_equal_h5py_reads_for_every_layout(golden: Path) -> None:
    """Every shard file: a dataset's, or each field's of a dataset of named fields."""
    ds = shardkit.open_dataset(golden, decode=None)
    columns = [ds] if ds.manifest.fields is None else list(ds.records.values())
    for column in columns:
        for entry in column.manifest.shards:
            same_samples(golden / entry.path, column.manifest.schema)
        if column.manifest.schema.compression == "none":
            reader = column.shard_cache.reader(0)
            assert reader._file is None and reader._mmap is not None   # opened without h5py
    ds.close()


def test_chunks_in_several_runs_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunk-index nodes between runs of chunks: samples straddling a gap are read from pieces."""
    monkeypatch.setitem(hdf5_layout.BYTES_CHUNK, "none", 64)
    path = tmp_path / "many-chunks.h5"
    write_shard("hdf5", path, BYTES, sized_samples(300, 40), "id-1")
    with open(path, "rb") as handle:
        locator = parse(read_head(handle.fileno(), str(path)), str(path), path.stat().st_size)
    assert len(locator.chunks) > 128 and len(set(np.diff(locator.chunks).tolist())) > 1   # several runs
    same_samples(path, BYTES)


def rewrite_locator(path: Path, edit: Callable[[Locator], None], fix_meta: bool = True) -> None:
    """Change the shard's locator as a crafted file would, its CRC32 (and metadata CRC) made right."""
    data = path.read_bytes()
    locator = parse(read_head_bytes(path), str(path), len(data))
    edit(locator)
    if fix_meta:
        locator.meta_crc32 = meta_crc32(memoryview(data), locator)
    with open(path, "r+b") as handle:
        handle.write(locator.encode())


def read_head_bytes(path: Path) -> bytes:
    with open(path, "rb") as handle:
        raw = read_head(handle.fileno(), str(path))
    assert raw is not None
    return raw


def golden_copy(tmp_path: Path, name: str = "hdf5-v3") -> Path:
    dst = tmp_path / name
    shutil.copytree(GOLDEN / name, dst)
    return dst


def past_eof(locator: Locator) -> None:
    offset, size = locator.tables["labels"]
    locator.tables["labels"] = (locator.file_size - size + 8, size)


def overlap(locator: Locator) -> None:
    locator.tables["crc32"] = (locator.tables["labels"][0], locator.tables["crc32"][1])


def table_on_data(locator: Locator) -> None:
    locator.tables["offsets"] = (int(locator.chunks[0]) + 8, locator.tables["offsets"][1])


def count_off(locator: Locator) -> None:
    locator.count += 1


def labels_short(locator: Locator) -> None:
    offset, size = locator.tables["labels"]
    locator.tables["labels"] = (offset, size - 8)


def into_userblock(locator: Locator) -> None:
    locator.tables["keys"] = (8, locator.tables["keys"][1])


CRAFTED = {"past_eof": (past_eof, "past the end"), "overlap": (overlap, "overlap"),
           "table_on_data": (table_on_data, "overlap"), "count": (count_off, "bytes for"),
           "into_userblock": (into_userblock, "userblock"), "labels_short": (labels_short, "/labels has")}


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_a_crafted_locator_is_refused_naming_the_shard(tmp_path: Path, case: str) -> None:
    edit, message = CRAFTED[case]
    dst = golden_copy(tmp_path)
    shard = dst / "shards" / "shard-00000.h5"
    rewrite_locator(shard, edit)
    reseal(dst)
    ds = shardkit.open_dataset(dst, decode=None)
    with pytest.raises(CorruptShardError, match=message) as caught:
        ds[0]
    assert "shard-00000.h5" in str(caught.value) and "locator" in str(caught.value)
    assert not shardkit.verify(str(dst), mode="quick").ok


@pytest.mark.parametrize("byte", [0, 9, 40, 100, -1])
def test_a_flipped_locator_byte_is_refused(tmp_path: Path, byte: int) -> None:
    dst = golden_copy(tmp_path)
    shard = dst / "shards" / "shard-00000.h5"
    data = bytearray(shard.read_bytes())
    length = len(read_head_bytes(shard))
    data[byte % length] ^= 0x10
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptShardError, match="shard-00000.h5: corrupt HDF5 shard: (locator|starts with)"):
        HDF5Reader(str(shard), BYTES)


def test_a_shard_changed_with_h5py_is_read_through_h5py(tmp_path: Path) -> None:
    """A file edited after it was written no longer matches its locator's metadata CRC: readers use h5py."""
    dst = golden_copy(tmp_path)
    shard = dst / "shards" / "shard-00000.h5"
    with h5py.File(shard, "r+") as handle:
        labels = handle["labels"][()]
        handle["new_labels"] = 1 - labels       # written elsewhere in the file, the old bytes stay
        del handle["labels"]
        handle.move("new_labels", "labels")
    reseal(dst)
    ds = shardkit.open_dataset(dst, decode=None)
    assert [ds[i][1] for i in range(3)] == (1 - labels[:3]).tolist()     # the old bytes are still in the file


def test_verify_deep_reports_a_locator_that_disagrees_with_hdf5(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) \
        -> None:
    src = golden_copy(tmp_path)
    with shardkit.open_dataset(src, decode=None) as ds:
        reader = ds.shard_cache.reader(0)
        samples = [Encoded(bytes(reader.read(i).payload), reader.read(i).label, reader.read(i).crc32, reader.key(i))
                   for i in range(len(reader))]
    with monkeypatch.context() as patch:       # written in chunks of 64 bytes, read with the usual limit
        patch.setitem(hdf5_layout.BYTES_CHUNK, "none", 64)
        shard = rewrite_shard(src, samples)
    report = shardkit.verify(str(src), mode="deep")
    assert report.ok, report.problems
    rewrite_locator(shard, lambda locator: locator.chunks.__setitem__(slice(0, 2), locator.chunks[1::-1]))
    reseal(src)
    report = shardkit.verify(str(src), mode="deep")
    assert any("locator disagrees with the HDF5 structure: chunk addresses" in problem.message
               for problem in report.problems)
    assert shardkit.verify(str(src), mode="quick").ok       # quick trusts the locator: deep is what finds it


@pytest.mark.parametrize("golden", ["hdf5-v3", "hdf5-v3-raw-gzip", "hdf5-v2", "hdf5-v1"])
def test_peek_gives_the_count_and_identity_a_reader_gives(golden: str) -> None:
    ds = shardkit.open_dataset(GOLDEN / golden, decode=None)
    fmt = get_format("hdf5")
    for number, entry in enumerate(ds.manifest.shards):
        path = str(GOLDEN / golden / entry.path)
        reader = ds.shard_cache.reader(number)
        assert fmt.peek(path, ds.manifest.schema, {}) == (len(reader), reader.dataset_id)
    ds.close()


def test_sealing_a_shard_holds_no_copy_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer seals the closed file through a map of it: a 24 MB shard is sealed holding well
    under a megabyte of Python memory (reading it whole held the shard's size again)."""
    from shardkit.formats import hdf5_writer
    schema = SampleSchema(kind="tabular", layout="array", dtype="float32", shape=(64,))
    writer = get_format("hdf5").open_writer(str(tmp_path / "big.h5"), schema, {}, "id")
    writer.append_many([Encoded.make(row) for row in np.ones((100_000, 64), dtype=np.float32)])
    sealed = trace_peaks(hdf5_writer, "seal", monkeypatch)
    writer.close()
    assert (tmp_path / "big.h5").stat().st_size > 24_000_000 and sealed[0] < 1 << 20
    same_samples(tmp_path / "big.h5", schema)
