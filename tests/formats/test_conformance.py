"""One conformance suite every registered format passes: write/read contract of ShardWriter/ShardReader."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from shardkit.errors import CorruptShardError
from shardkit.formats import format_names, get_format
from shardkit.records import NO_LABEL, Encoded, EncodedRows
from shardkit.schema import SampleSchema

from .shard_helpers import payload_bytes, write_shard

BYTES_SCHEMA = SampleSchema(kind="image")
ARRAY_SCHEMA = SampleSchema(kind="image", layout="array", dtype="uint8", shape=(5, 7, 3))


def _bytes_samples(count: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    samples = []
    for index in range(count):
        size = int(rng.integers(0, 5000)) if index % 10 else 0   # empty payloads are legal
        samples.append(Encoded.make(rng.integers(0, 256, size, dtype=np.uint8).tobytes(), index % 7))
    return samples


def _array_samples(count: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [Encoded.make(rng.integers(0, 256, ARRAY_SCHEMA.shape, dtype=np.uint8), index % 3)
            for index in range(count)]


class TestFormatConformance:
    """Every format stores exactly what it was given and reads it back by index."""

    @pytest.mark.parametrize("compression", ["none", "gzip"])
    def test_bytes_round_trip(self, fmt: str, tmp_path: Path, compression: str) -> None:
        schema = SampleSchema(kind="image", compression=compression)
        if not _supports(fmt, schema):
            pytest.skip(f"{fmt} does not store {compression}")
        samples = _bytes_samples(150)
        path = tmp_path / f"shard{get_format(fmt).extension}"
        write_shard(fmt, path, schema, samples)
        reader = get_format(fmt).open_reader(str(path), schema)
        assert len(reader) == len(samples)
        for index in [0, 1, 9, 10, 77, 149, 3]:
            got = reader.read(index)
            assert payload_bytes(got.payload) == payload_bytes(samples[index].payload)
            assert got.label == samples[index].label
            assert got.crc32 == samples[index].crc32
            assert got.crc_ok()
        assert reader.labels().tolist() == [s.label for s in samples]
        reader.close()

    @pytest.mark.parametrize("compression", ["none", "gzip", "lzf"])
    def test_array_round_trip(self, fmt: str, tmp_path: Path, compression: str) -> None:
        schema = SampleSchema(kind="image", layout="array", dtype="uint8", shape=(5, 7, 3), compression=compression)
        if not _supports(fmt, schema):
            pytest.skip(f"{fmt} does not store {compression}")
        samples = _array_samples(40)
        path = tmp_path / f"shard{get_format(fmt).extension}"
        write_shard(fmt, path, schema, samples)
        reader = get_format(fmt).open_reader(str(path), schema)
        for index in range(len(samples)):
            got = reader.read(index)
            assert isinstance(got.payload, np.ndarray)
            assert got.payload.shape == (5, 7, 3) and got.payload.dtype == np.uint8
            np.testing.assert_array_equal(got.payload, samples[index].payload)
            assert got.crc_ok()
        reader.close()

    def test_empty_shard(self, fmt: str, tmp_path: Path) -> None:
        path = tmp_path / f"empty{get_format(fmt).extension}"
        write_shard(fmt, path, BYTES_SCHEMA, [])
        reader = get_format(fmt).open_reader(str(path), BYTES_SCHEMA)
        assert len(reader) == 0
        with pytest.raises(IndexError):
            reader.read(0)
        reader.close()

    def test_out_of_range(self, fmt: str, tmp_path: Path) -> None:
        path = tmp_path / f"s{get_format(fmt).extension}"
        write_shard(fmt, path, BYTES_SCHEMA, _bytes_samples(5))
        reader = get_format(fmt).open_reader(str(path), BYTES_SCHEMA)
        for bad in (5, 100, -1):
            with pytest.raises(IndexError):
                reader.read(bad)
        reader.close()

    def test_unlabeled(self, fmt: str, tmp_path: Path) -> None:
        schema = SampleSchema(kind="image", labeled=False)
        samples = [Encoded.make(b"x" * n) for n in range(1, 6)]
        path = tmp_path / f"s{get_format(fmt).extension}"
        write_shard(fmt, path, schema, samples)
        reader = get_format(fmt).open_reader(str(path), schema)
        assert [reader.read(i).label for i in range(5)] == [NO_LABEL] * 5
        reader.close()

    def test_byte_identical_writes(self, fmt: str, tmp_path: Path) -> None:
        digests = set()
        for run in range(2):
            path = tmp_path / f"run{run}{get_format(fmt).extension}"
            write_shard(fmt, path, BYTES_SCHEMA, _bytes_samples(60, seed=3))
            digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
        assert len(digests) == 1

    def test_truncated_file_is_a_corrupt_shard(self, fmt: str, tmp_path: Path) -> None:
        path = tmp_path / f"s{get_format(fmt).extension}"
        write_shard(fmt, path, BYTES_SCHEMA, _bytes_samples(60))
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:
            handle.truncate(size // 2)
        with pytest.raises(CorruptShardError) as caught:
            reader = get_format(fmt).open_reader(str(path), BYTES_SCHEMA)
            for index in range(len(reader)):
                reader.read(index)
        assert str(path) in str(caught.value)

    def test_garbage_file_is_a_corrupt_shard(self, fmt: str, tmp_path: Path) -> None:
        path = tmp_path / f"s{get_format(fmt).extension}"
        path.write_bytes(b"this is not a shard at all" * 100)
        with pytest.raises(CorruptShardError) as caught:
            get_format(fmt).open_reader(str(path), BYTES_SCHEMA)
        assert str(path) in str(caught.value)

    @pytest.mark.parametrize("layout", ["bytes", "array"])
    def test_append_many_writes_the_same_file_as_append(self, fmt: str, tmp_path: Path, layout: str) -> None:
        schema, samples = (BYTES_SCHEMA, _bytes_samples(40)) if layout == "bytes" else \
            (ARRAY_SCHEMA, _array_samples(40))
        _assert_runs_write_like_append(fmt, tmp_path, schema, samples, [samples[1:25], [], samples[25:]])

    @pytest.mark.parametrize("compression", ["none", "gzip"])
    @pytest.mark.parametrize("dtype, shape", [("float32", (6,)), ("uint8", (5, 7, 3))])
    @pytest.mark.parametrize("small_batches", [False, True], ids=["batches", "small-batches"])
    def test_a_block_of_rows_writes_the_same_file_as_append(self, fmt: str, tmp_path: Path, compression: str,
                                                            dtype: str, shape: tuple, small_batches: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
        """EncodedRows (how CSV rows arrive) may take a format's block path: the bytes must not change,
        wherever a writer's internal batches end."""
        if small_batches:                  # LMDB commits every 17 records or 1000 bytes: boundaries inside blocks
            import shardkit.formats.lmdb_writer as lmdb_format
            monkeypatch.setattr(lmdb_format, "BATCH_SAMPLES", 17)
            monkeypatch.setattr(lmdb_format, "BATCH_BYTES", 1000)
        schema = SampleSchema(kind="tabular", layout="array", dtype=dtype, shape=shape, compression=compression)
        if not _supports(fmt, schema):
            pytest.skip(f"{fmt} does not store {compression}")
        rng = np.random.default_rng(5)
        block = (rng.standard_normal((300,) + shape) * 50).astype(dtype)
        samples = [Encoded.make(row, index % 4) for index, row in enumerate(block)]
        rows = EncodedRows(block, [sample.label for sample in samples], [sample.crc32 for sample in samples])

        def facts(items: list) -> list:
            return [(item.payload.tobytes(), item.label, item.crc32) for item in items]
        assert facts(list(rows)) == facts(samples) and facts([rows[7]]) == facts(samples[7:8])
        _assert_runs_write_like_append(fmt, tmp_path, schema, samples, [rows[1:150], rows[150:150], rows[150:]])

    @pytest.mark.parametrize("compression", ["none", "gzip"])
    @pytest.mark.parametrize("small_batches", [False, True], ids=["batches", "small-batches"])
    def test_a_run_of_byte_strings_writes_the_same_file_as_append(self, fmt: str, tmp_path: Path, compression: str,
                                                                  small_batches: bool,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
        """EncodedRows of byte strings (how image files arrive) take a format's run path: the bytes
        must not change, keys included, wherever a writer's internal batches end."""
        if small_batches:
            import shardkit.formats.lmdb_writer as lmdb_format
            monkeypatch.setattr(lmdb_format, "BATCH_SAMPLES", 17)
            monkeypatch.setattr(lmdb_format, "BATCH_BYTES", 20000)
        schema = SampleSchema(kind="image", compression=compression)
        if not _supports(fmt, schema):
            pytest.skip(f"{fmt} does not store {compression}")
        samples = [Encoded.make(sample.payload, sample.label, key=f"cls/{index:04d}.jpg")
                   for index, sample in enumerate(_bytes_samples(120))]
        rows = EncodedRows([sample.payload for sample in samples], [sample.label for sample in samples],
                           [sample.crc32 for sample in samples], [sample.key for sample in samples])
        assert [(item.payload, item.label, item.crc32, item.key) for item in rows[3:5]] == \
            [(item.payload, item.label, item.crc32, item.key) for item in samples[3:5]]
        _assert_runs_write_like_append(fmt, tmp_path, schema, samples, [rows[1:70], rows[70:70], rows[70:]])

    def test_append_many_refuses_a_wrong_shape(self, fmt: str, tmp_path: Path) -> None:
        samples = _array_samples(3) + [Encoded.make(np.zeros((5, 7, 2), dtype=np.uint8), 0)]
        writer = get_format(fmt).open_writer(str(tmp_path / f"bad{get_format(fmt).extension}"), ARRAY_SCHEMA,
                                             get_format(fmt).writer_options())
        with pytest.raises(ValueError, match="shape"):
            writer.append_many(samples)
        writer.abort()

    def test_writer_writes_only_its_path(self, fmt: str, tmp_path: Path) -> None:
        path = tmp_path / f"only{get_format(fmt).extension}"
        write_shard(fmt, path, BYTES_SCHEMA, _bytes_samples(20))
        assert sorted(os.listdir(tmp_path)) == [path.name]


#: (layout, compression) cases of the optional-hook suite: what each hook answers differs by both.
HOOK_CASES = [("bytes", "none"), ("bytes", "gzip"), ("array", "none"), ("array", "gzip")]


class TestOptionalHooks:
    """Every optional hook of a format's reader and format object gives what the required ones give:
    read_many == [read ...], payload == read().payload, tables() == the reads' labels and CRC32s,
    key() the key written, peek() == (len, dataset_id), and locate() rows, labels and CRC32s that
    are the reads' bytes where it answers (uncompressed fixed-shape rows: every format must)."""

    @pytest.fixture(params=HOOK_CASES, ids=[f"{layout}-{compression}" for layout, compression in HOOK_CASES])
    def shard(self, request: pytest.FixtureRequest, fmt: str, tmp_path: Path) -> "tuple[Path, SampleSchema, list]":
        layout, compression = request.param
        shape = {"dtype": "uint8", "shape": (5, 7, 3)} if layout == "array" else {}
        schema = SampleSchema(kind="image", layout=layout, compression=compression, **shape)
        samples = _array_samples(40) if layout == "array" else _bytes_samples(40)
        samples = [Encoded(s.payload, s.label, s.crc32, f"k/{index}") for index, s in enumerate(samples)]
        path = tmp_path / f"shard{get_format(fmt).extension}"
        write_shard(fmt, path, schema, samples, dataset_id="the-dataset")
        return path, schema, samples

    def test_batched_and_payload_reads_equal_single_reads(self, fmt: str, shard: tuple) -> None:
        path, schema, samples = shard
        reader = get_format(fmt).open_reader(str(path), schema)
        try:
            indices = [5, 0, 39, 5, 17, 16, 2]
            singles = [reader.read(index) for index in indices]
            for one, many, index in zip(singles, reader.read_many(indices), indices):
                written = samples[index]
                assert payload_bytes(many.payload) == payload_bytes(one.payload) == payload_bytes(written.payload)
                assert (many.label, many.crc32) == (one.label, one.crc32) == (written.label, written.crc32)
                assert payload_bytes(reader.payload(index)) == payload_bytes(one.payload)
                assert reader.key(index) == f"k/{index}"
            tables = reader.tables()
            if tables is not None:
                assert list(tables[0]) == [s.label for s in samples] and list(tables[1]) == [s.crc32 for s in samples]
            assert reader.labels().tolist() == [s.label for s in samples]
            with pytest.raises(IndexError):
                reader.read_many([0, 40])
        finally:
            reader.close()

    def test_peek_gives_the_count_and_identity(self, fmt: str, shard: tuple) -> None:
        path, schema, samples = shard
        assert get_format(fmt).peek(str(path), schema) == (len(samples), "the-dataset")

    def test_locate_names_the_bytes_a_reader_reads(self, fmt: str, shard: tuple) -> None:
        path, schema, samples = shard
        fd = os.open(path, os.O_RDONLY)
        try:
            location = get_format(fmt).locate(fd, os.fstat(fd).st_size, str(path), schema)
            if schema.is_array and schema.compression == "none":
                assert location is not None, f"{fmt} must locate uncompressed fixed-shape rows"
            if location is None:
                return
            rows = location.rows
            data = os.pread(fd, rows.row_count * rows.row_dtype.itemsize, rows.offset)
            labels = np.frombuffer(os.pread(fd, location.labels[1], location.labels[0]), "<i8")
            crcs = np.frombuffer(os.pread(fd, location.crcs[1], location.crcs[0]), location.crc_dtype)
        finally:
            os.close(fd)
        assert (location.count, location.dataset_id) == (len(samples), "the-dataset")
        assert data == b"".join(payload_bytes(s.payload) for s in samples)
        assert labels.tolist() == [s.label for s in samples] and crcs.tolist() == [s.crc32 for s in samples]


def _assert_runs_write_like_append(fmt: str, tmp_path: Path, schema: SampleSchema, samples: list,
                                   runs: list) -> None:
    """append(samples[0]) then append_many(run) for each run gives the file append() on each gives."""
    extension = get_format(fmt).extension
    one, many = tmp_path / f"one{extension}", tmp_path / f"many{extension}"
    write_shard(fmt, one, schema, samples)
    writer = get_format(fmt).open_writer(str(many), schema, get_format(fmt).writer_options())
    writer.append(samples[0])
    for run in runs:
        writer.append_many(run)
    writer.close()
    assert hashlib.sha256(many.read_bytes()).hexdigest() == hashlib.sha256(one.read_bytes()).hexdigest()


#: Which compressions each format stores, written down rather than asked of the format, so a
#: format that wrongly refuses one fails here instead of skipping.
SUPPORTED = {"hdf5": {"none", "gzip", "lzf"}, "lmdb": {"none", "gzip"}, "pt": {"none", "gzip"}}


def _supports(fmt_name: str, schema: SampleSchema) -> bool:
    """Whether the matrix says fmt stores schema's compression; a refusal must agree with it."""
    from shardkit.errors import UsageError
    expected = schema.compression in SUPPORTED[fmt_name]
    try:
        get_format(fmt_name).check(schema)
    except UsageError:
        assert not expected, f"{fmt_name} refuses {schema.compression}, which it must store"
        return False
    assert expected, f"{fmt_name} accepts {schema.compression}, which the matrix says it cannot store"
    return True


def test_the_support_matrix_covers_every_format() -> None:
    from shardkit.formats import format_names
    assert sorted(SUPPORTED) == format_names()


def test_registry_lists_hdf5() -> None:
    assert "hdf5" in format_names()
