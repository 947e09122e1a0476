"""A per-sample fault found inside a format is a CorruptSampleError naming the shard and the
sample, with a message built from those fields, in the reader, the dataset, verify and re-sharding."""
from __future__ import annotations

import pickle
import struct
import zlib
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import CorruptSampleError
from shardkit.formats import get_format, recorded_options
from shardkit.manifest import load_manifest
from shardkit.formats.packing import DEFAULT_GZIP_LEVEL

from .helpers import shard_paths


@pytest.fixture(params=["lmdb", "pt"])
def gzip_dataset(request: pytest.FixtureRequest, image_tree: Path, tmp_path: Path) -> Path:
    dst = tmp_path / request.param
    shardkit.convert(str(image_tree), str(dst), format=request.param, compression="gzip",
                     samples_per_shard=40, quiet=True)
    return dst


def _break_zlib_header(dst: Path, index: int) -> tuple:
    """Zero the zlib header of sample index's compressed record in place; (shard, local)."""
    ds = shardkit.open_dataset(dst, decode=None)
    payload = bytes(memoryview(ds[index][0]))
    shard, local = ds.locate(index)
    ds.close()
    path = shard_paths(dst)[shard]
    content = bytearray(path.read_bytes())
    where = content.find(zlib.compress(payload, DEFAULT_GZIP_LEVEL))
    assert where > 0 and content.find(zlib.compress(payload, DEFAULT_GZIP_LEVEL), where + 1) < 0
    content[where:where + 2] = b"\0\0"
    path.write_bytes(bytes(content))
    return shard, local


def test_damaged_zlib_record_raises_corrupt_sample_error(gzip_dataset: Path) -> None:
    shard, local = _break_zlib_header(gzip_dataset, 45)
    ds = shardkit.open_dataset(gzip_dataset, decode=None)
    with pytest.raises(CorruptSampleError) as caught:
        ds[45]
    error = caught.value
    name = shard_paths(gzip_dataset)[shard].name
    assert (error.index, error.global_index, error.shard) == (local, 45, f"shards/{name}")
    assert str(error) == f"{error.path}: sample {local} (global index 45): {error.problem}"
    assert name in str(error) and "does not inflate" in error.problem
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.shard, copy.index) == (str(error), error.shard, error.index)
    assert ds[44] is not None and ds[46] is not None
    ds.close()


def test_verify_and_reshard_name_the_damaged_sample(gzip_dataset: Path, tmp_path: Path) -> None:
    shard, local = _break_zlib_header(gzip_dataset, 45)
    report = shardkit.verify(str(gzip_dataset), mode="deep")
    samples = [problem for problem in report.problems if problem.kind == "sample"]
    assert [(problem.shard, problem.index) for problem in samples] == \
        [(f"shards/{shard_paths(gzip_dataset)[shard].name}", local)]
    assert samples[0].message.count(str(shard_paths(gzip_dataset)[shard])) == 1
    out = shardkit.convert(str(gzip_dataset), str(tmp_path / "copy"), format="hdf5", quiet=True)
    assert out.skipped == 1 and out.num_samples == 119


def test_error_message_follows_its_fields() -> None:
    error = CorruptSampleError("/d/shards/s.h5", 3, "fails its CRC32 check")
    assert str(error) == "/d/shards/s.h5: sample 3: fails its CRC32 check"
    error.global_index = 19
    assert str(error) == "/d/shards/s.h5: sample 3 (global index 19): fails its CRC32 check"
    assert isinstance(error, shardkit.CorruptShardError) and error.exit_code == 1


def _zero_first_bytes(path: Path, stored: bytes) -> None:
    """Zero the first two bytes of `stored`, found exactly once in the file (same size after)."""
    content = bytearray(path.read_bytes())
    where = content.find(stored)
    assert where > 0 and content.find(stored, where + 1) < 0
    content[where:where + 2] = b"\0\0"
    path.write_bytes(bytes(content))


@pytest.mark.parametrize("format_name", ["hdf5", "lmdb", "pt"])
def test_damaged_key_block_names_the_sample_whose_key_was_asked(format_name: str, image_tree: Path,
                                                                tmp_path: Path) -> None:
    """The key table's zlib block is damaged: asking a sample's key names that sample."""
    dst = tmp_path / format_name
    shardkit.convert(str(image_tree), str(dst), format=format_name, samples_per_shard=40, quiet=True)
    ds = shardkit.open_dataset(dst, decode=None)
    keys = [ds.key(index) for index in range(40, 80)]          # shard 1, one key block of 40 keys
    ds.close()
    encoded = [key.encode() for key in keys]
    block = zlib.compress(struct.pack(f"<{len(keys) + 1}I", len(keys), *map(len, encoded)) + b"".join(encoded), 6)
    _zero_first_bytes(shard_paths(dst)[1], block)
    ds = shardkit.open_dataset(dst, decode=None)
    assert ds.key(3) == ds.key(3)                               # shard 0 untouched
    with pytest.raises(CorruptSampleError) as caught:
        ds.key(57)
    assert caught.value.index == 17 and caught.value.path == str(shard_paths(dst)[1])
    assert "key table block 0 does not inflate" in str(caught.value)
    ds.close()


def test_short_lmdb_row_block_names_the_sample(tmp_path: Path) -> None:
    """LMDB tabular rows live in blocks of rows; a block cut short is a fault of the sample asked
    for, not of the whole shard."""
    lmdb = pytest.importorskip("lmdb")
    table = tmp_path / "rows.csv"
    columns = [f"c{number}" for number in range(64)]      # 256-byte rows: 255 to a 64 KiB block
    table.write_text(",".join(columns + ["label"]) + "\n"
                     + "".join(",".join([str(row)] * 64 + [str(row % 3)]) + "\n" for row in range(600)))
    dst = tmp_path / "dst"
    shardkit.convert(str(table), str(dst), format="lmdb", label_column="label", quiet=True)
    manifest = load_manifest(dst)
    path = shard_paths(dst)[0]
    fmt = get_format("lmdb")
    reader = fmt.open_reader(str(path), manifest.schema, recorded_options(fmt, manifest, str(dst)))
    per_block = reader._per_block
    reader.close()
    assert 0 < per_block < 300
    with lmdb.open(str(path), subdir=False, lock=False) as env, env.begin(write=True) as txn:
        second = (1).to_bytes(8, "big")                     # the key of the second block of rows
        assert txn.put(second, bytes(txn.get(second))[:1000])
    reader = fmt.open_reader(str(path), manifest.schema, recorded_options(fmt, manifest, str(dst)))
    try:
        assert reader.read(per_block - 1) is not None and reader.read(2 * per_block) is not None
        with pytest.raises(CorruptSampleError) as caught:
            reader.read(per_block + 1)
        assert caught.value.index == per_block + 1 and caught.value.path == str(path)
        assert caught.value.problem == f"block 1 holds 1000 bytes, not {per_block * 256}"
        with pytest.raises(CorruptSampleError) as caught:
            reader.read_many([0, per_block + 2])
        assert caught.value.index == per_block + 2
    finally:
        reader.close()


@pytest.mark.parametrize("damage", ["magic", "version", "flags", "label", "raw length", "both lengths"])
def test_damaged_lmdb_record_header_in_a_batch_names_the_sample(damage: str, image_tree: Path, tmp_path: Path) -> None:
    """A batch of LMDB records has its headers checked at once; a header that lies (a field of
    the record's 32 bytes changed, the record still a valid LMDB value) fails the batch read with
    the sample named, as a read of that sample alone does; batches without it read as before."""
    dst = tmp_path / "dst"
    shardkit.convert(str(image_tree), str(dst), format="lmdb", quiet=True)
    ds = shardkit.open_dataset(dst, decode=None)
    before = [bytes(memoryview(image)) for image, _ in ds.__getitems__(list(range(len(ds))))]
    shard, local = ds.locate(7)
    ds.close()
    offset, value = {"magic": (0, b"SX"), "version": (2, b"\x02"), "flags": (3, b"\x02"),
                     "label": (8, struct.pack("<q", 5)), "raw length": (16, struct.pack("<Q", 3)),
                     "both lengths": (16, struct.pack("<QQ", 3, 3))}[damage]
    path = shard_paths(dst)[shard]
    content = bytearray(path.read_bytes())
    header = content.find(before[7]) - 32         # the record: a 32-byte header, then the image's bytes
    assert header > 0 and content[header:header + 2] == b"SK" and content.count(before[7]) == 1
    content[header + offset:header + offset + len(value)] = value
    path.write_bytes(bytes(content))            # in place: the file keeps its size
    ds = shardkit.open_dataset(dst, decode=None)
    try:
        with pytest.raises(CorruptSampleError) as caught:
            ds.__getitems__(list(range(len(ds))))
        assert (caught.value.index, caught.value.global_index) == (local, 7)
        others = [index for index in range(len(ds)) if index != 7]
        assert [bytes(memoryview(image)) for image, _ in ds.__getitems__(others)] == [before[i] for i in others]
    finally:
        ds.close()
