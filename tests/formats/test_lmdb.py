"""LMDB specifics: map growth and a tight file, shared environments, fork, readahead, damage."""
from __future__ import annotations

import json
import multiprocessing
import os
import struct
import zlib
from typing import Any
from pathlib import Path

import lmdb
import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptShardError, UsageError
from shardkit.formats import get_format
from shardkit.formats.base import ReadaheadOptions
from shardkit.formats import lmdb_writer as lmdb_format
from shardkit.formats.lmdb_layout import RECORD, sample_key
from shardkit.formats.lmdb_env import ENVIRONMENTS
from shardkit.records import Encoded
from shardkit.schema import SampleSchema

from .shard_helpers import sized_samples, write_shard

FMT = get_format("lmdb")
SCHEMA = SampleSchema(kind="image")


def _write(path: Path, samples: list, schema: SampleSchema = SCHEMA) -> None:
    write_shard(FMT.name, path, schema, samples)


def _payload(encoded: Encoded) -> bytes:
    return bytes(memoryview(encoded.payload))


def test_map_grows_past_its_start_and_the_file_stays_tight(tmp_path: Path) -> None:
    samples = sized_samples(48, 600_000)        # ~29 MB: past the 16 MiB first map, over one 32 MiB batch
    path = tmp_path / "big.lmdb"
    _write(path, samples)
    psize = 4096
    needed = sum(-(-(32 + len(s.payload) + 16) // psize) * psize for s in samples)
    assert needed < os.path.getsize(path) <= needed + 32 * psize
    reader = FMT.open_reader(str(path), SCHEMA)
    assert [_payload(reader.read(i)) == s.payload for i, s in enumerate(samples)] == [True] * len(samples)
    reader.close()


def test_many_small_transactions_and_map_full_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = sized_samples(300, 3000)
    _write(tmp_path / "plain.lmdb", samples)
    # Tiny batches and no size estimate: many commits, and every growth goes through MapFullError.
    monkeypatch.setattr(lmdb_format, "BATCH_SAMPLES", 7)
    monkeypatch.setattr(lmdb_format, "INITIAL_MAP_SIZE", 64 << 10)
    monkeypatch.setattr(lmdb_format.LMDBWriter, "_estimate", lambda self: 0)
    for name in ("a.lmdb", "b.lmdb"):
        _write(tmp_path / name, samples)
    assert (tmp_path / "a.lmdb").read_bytes() == (tmp_path / "b.lmdb").read_bytes()
    reader = FMT.open_reader(str(tmp_path / "a.lmdb"), SCHEMA)
    assert all(_payload(reader.read(i)) == s.payload for i, s in enumerate(samples))
    reader.close()
    env = lmdb.open(str(tmp_path / "a.lmdb"), subdir=False, readonly=True, lock=False)
    assert env.info()["last_txnid"] > 40
    env.close()


def test_records_and_reserved_keys_as_documented(tmp_path: Path) -> None:
    schema = SampleSchema(kind="image", compression="gzip", compression_level=9)
    samples = [Encoded.make(b"abc" * 1000, 3, key="a/b.png"), Encoded.make(b"", -1, key="c.png")]
    path = tmp_path / "s.lmdb"
    write_shard(FMT.name, path, schema, samples, dataset_id="0123abcd")
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        keys = [key for key, _ in txn.cursor()]
        assert keys == [(0).to_bytes(8, "big"), (1).to_bytes(8, "big"), b"__key_blocks__", b"__keys__",
                        b"__labels__", b"__meta__"]
        meta = json.loads(txn.get(b"__meta__"))
        assert meta == {"shardkit_format": "lmdb", "format_version": 2, "layout": "bytes", "dtype": None,
                        "shape": None, "compression": "gzip", "num_samples": 2, "rows_per_block": 0,
                        "dataset_id": "0123abcd"}
        blocks = np.frombuffer(txn.get(b"__key_blocks__"), "<i8").tolist()
        block = zlib.decompress(txn.get(b"__keys__"))
        assert blocks == [0, len(txn.get(b"__keys__"))]
        assert np.frombuffer(block[:12], "<u4").tolist() == [2, 7, 5] and block[12:] == b"a/b.pngc.png"
        assert np.frombuffer(txn.get(b"__labels__"), "<i8").tolist() == [3, -1]
        value = txn.get((0).to_bytes(8, "big"))
        magic, version, flags, crc, label, raw, stored = struct.unpack_from("<2sBBIqQQ", value)
        assert (magic, version, flags, label, raw, stored) == (b"SK", 1, 1, 3, 3000, len(value) - 32)
        assert value[32:] == zlib.compress(b"abc" * 1000, 9) and crc == zlib.crc32(b"abc" * 1000)
    env.close()


def test_fixed_shape_rows_are_stored_in_blocks_without_headers(tmp_path: Path) -> None:
    """Uncompressed arrays (CSV rows): blocks of rows back to back, CRCs in their own table."""
    schema = SampleSchema(kind="tabular", layout="array", dtype="float32", shape=(3,))
    rows = np.arange(3 * 12000, dtype="<f4").reshape(12000, 3)
    samples = [Encoded.make(row, index % 5, key=f"t.csv:{index + 2}") for index, row in enumerate(rows)]
    path = tmp_path / "rows.lmdb"
    write_shard(FMT.name, path, schema, samples)
    per_block = (16 * 4096 - 16) // 12
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        meta = json.loads(txn.get(b"__meta__"))
        assert meta["rows_per_block"] == per_block
        blocks = -(-12000 // per_block)
        assert env.stat()["entries"] == blocks + 5
        assert txn.get((1).to_bytes(8, "big")) == rows[per_block:2 * per_block].tobytes()
        assert txn.get((blocks - 1).to_bytes(8, "big")) == rows[(blocks - 1) * per_block:].tobytes()
        crcs = np.frombuffer(txn.get(b"__crc32__"), "<u4")
        assert crcs.tolist() == [zlib.crc32(row.tobytes()) for row in rows]
    env.close()
    reader = FMT.open_reader(str(path), schema)
    for index in (0, per_block - 1, per_block, 11999):
        encoded = reader.read(index)
        assert encoded.payload.tolist() == rows[index].tolist() and encoded.crc_ok()
        assert encoded.label == index % 5 and reader.key(index) == f"t.csv:{index + 2}"
    reader.close()
    # 12 payload bytes per row: the file stays within a few percent of the payload (v1 took 72+ per row)
    assert os.path.getsize(path) < rows.nbytes * 1.15 + 12000 * 12 + (64 << 10)


def test_lzf_is_refused(image_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="lzf"):
        shardkit.convert(str(image_tree), str(tmp_path / "out"), format="lmdb", compression="lzf", quiet=True)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_two_readers_of_one_file_share_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "s.lmdb"
    samples = sized_samples(10, 100)
    _write(path, samples)
    first = FMT.open_reader(str(path), SCHEMA)
    second = FMT.open_reader(str(path), SCHEMA)
    first.close()
    assert _payload(second.read(9)) == samples[9].payload
    second.close()
    third = FMT.open_reader(str(path), SCHEMA)     # the last close really closed it
    assert len(third) == 10
    third.close()
    assert sorted(os.listdir(tmp_path)) == ["s.lmdb"]     # readers leave no lock file


def _read_in_child(path: str, queue: "multiprocessing.Queue") -> None:
    reader = FMT.open_reader(path, SCHEMA)
    queue.put(_payload(reader.read(4)))
    reader.close()


def test_a_forked_child_opens_its_own_environment(tmp_path: Path) -> None:
    path = tmp_path / "s.lmdb"
    samples = sized_samples(10, 5000)
    _write(path, samples)
    parent = FMT.open_reader(str(path), SCHEMA)
    parent.read(0)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(str(path), queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and got == samples[4].payload
    assert _payload(parent.read(7)) == samples[7].payload      # the child's close left ours alone
    parent.close()


def test_fork_while_locks_are_held_does_not_hang_the_child(tmp_path: Path) -> None:
    path = tmp_path / "s.lmdb"
    samples = sized_samples(10, 5000)
    _write(path, samples)
    parent = FMT.open_reader(str(path), SCHEMA)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(str(path), queue))
    with parent._shared.lock, ENVIRONMENTS._lock:    # as if another thread were reading
        child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and got == samples[4].payload
    parent.close()


def _read_inherited_rows(reader: object, path: str, schema: SampleSchema, queue: "multiprocessing.Queue") -> None:
    FMT.open_reader(path, schema).close()  # the child's first open closes what it inherited: the map is gone
    try:
        reader.read(1)                 # type: ignore[attr-defined]
        queue.put("read")
    except CorruptShardError as exc:
        queue.put(str(exc))


def test_rows_of_a_map_closed_under_a_reader_are_refused_not_read(tmp_path: Path) -> None:
    """A reader inherited over fork whose environment the child closed: its rows' block addresses
    point into a map that is gone, so a read is a clear error, never a read of unmapped memory."""
    schema = SampleSchema(kind="tabular", layout="array", dtype="float32", shape=(3,))
    rows = np.arange(3 * 9000, dtype="<f4").reshape(9000, 3)
    path = tmp_path / "rows.lmdb"
    write_shard(FMT.name, path, schema, [Encoded.make(row, 0) for row in rows])
    reader = FMT.open_reader(str(path), schema)
    assert reader.read(1).payload.tolist() == rows[1].tolist()       # its block's address is known now
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_inherited_rows, args=(reader, str(path), schema, queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert child.exitcode == 0 and "reader is closed" in got, got
    assert reader.read(8999).payload.tolist() == rows[8999].tolist()   # the parent's map is untouched
    reader.close()
    with pytest.raises(CorruptShardError, match="closed"):
        reader.read(1)


def test_readahead_default_option_and_override(image_tree: Path, tmp_path: Path) -> None:
    assert FMT.default_options(SCHEMA, 1 << 20) == {"readahead": True}
    assert FMT.default_options(SCHEMA, 1 << 60) == {"readahead": False}
    dst = tmp_path / "out"
    shardkit.convert(str(image_tree), str(dst), format="lmdb", samples_per_shard=40, readahead=False, quiet=True)
    assert json.loads((dst / "manifest.json").read_text())["format_options"] == {"readahead": False}
    with shardkit.open_dataset(dst, decode=None) as plain, plain.shard_cache as cache:
        assert cache.reader(0).readahead is False
        reference = [_payload(plain.read_encoded(i)) for i in range(len(plain))]
    with shardkit.open_dataset(dst, decode=None, readahead=True) as forced, forced.shard_cache as cache:
        assert cache.reader(1).readahead is True
        assert [_payload(forced.read_encoded(i)) for i in range(len(forced))] == reference


def test_both_readahead_settings_read_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "s.lmdb"
    samples = sized_samples(6, 200_000)
    _write(path, samples)
    for readahead in (False, True):
        reader = FMT.open_reader(str(path), SCHEMA, ReadaheadOptions(readahead))
        assert reader.readahead is readahead
        assert all(_payload(reader.read(i)) == s.payload for i, s in enumerate(samples))
        reader.close()


def test_arrays_come_back_read_only(tmp_path: Path) -> None:
    schema = SampleSchema(kind="tabular", layout="array", dtype="float32", shape=(6,), compression="gzip")
    arrays = [np.arange(6, dtype=np.float32) * k for k in range(5)]
    path = tmp_path / "a.lmdb"
    _write(path, [Encoded.make(a, 0) for a in arrays], schema)
    reader = FMT.open_reader(str(path), schema)
    got = reader.read(3).payload
    assert got.dtype == np.float32 and not got.flags.writeable
    np.testing.assert_array_equal(got, arrays[3])
    reader.close()


def _rewrite(path: Path, change) -> None:
    env = lmdb.open(str(path), subdir=False, lock=False)
    with env.begin(write=True) as txn:
        change(txn)
    env.close()


@pytest.mark.parametrize("change, message", [
    (lambda txn: txn.put(b"__meta__", b"{not json"), "not JSON"),
    (lambda txn: txn.put(b"__meta__", json.dumps({"shardkit_format": "lmdb", "format_version": 9, "layout": "bytes",
                                                  "dtype": None, "shape": None, "compression": "none",
                                                  "num_samples": 10}).encode()), "format version 9"),
    (lambda txn: txn.delete((4).to_bytes(8, "big")), "entries for 10 samples"),
    (lambda txn: txn.put(b"__labels__", b"\x00" * 8), "label table"),
    (lambda txn: txn.delete(b"__meta__"), "no metadata"),
])
def test_malformed_shards_are_refused_on_open(tmp_path: Path, change, message: str) -> None:
    path = tmp_path / "s.lmdb"
    _write(path, sized_samples(10, 100))
    _rewrite(path, change)
    with pytest.raises(CorruptShardError, match=message) as caught:
        FMT.open_reader(str(path), SCHEMA)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("field, value, message", [
    (0, b"XK", "bad record header"),
    (24, struct.pack("<Q", 10 ** 12), "does not match the record"),
    (16, struct.pack("<Q", 10 ** 12), "corrupt record"),
    (8, struct.pack("<q", 4), "does not match the record"),
])
def test_damaged_record_header_names_the_sample(tmp_path: Path, field: int, value: bytes, message: str) -> None:
    path = tmp_path / "s.lmdb"
    samples = sized_samples(10, 5000)
    _write(path, samples)
    header = struct.pack("<2sBBI", b"SK", 1, 0, samples[6].crc32)
    data = path.read_bytes()
    offset = data.find(header)
    assert offset > 0 and data.count(header) == 1
    with open(path, "r+b") as handle:
        handle.seek(offset + field)
        handle.write(value)
    reader = FMT.open_reader(str(path), SCHEMA)
    assert _payload(reader.read(5)) == samples[5].payload
    with pytest.raises(CorruptShardError, match=message) as caught:
        reader.read(6)
    assert str(path) in str(caught.value) and "sample 6" in str(caught.value)
    reader.close()


def test_truncated_to_a_page_boundary(tmp_path: Path) -> None:
    path = tmp_path / "s.lmdb"
    _write(path, sized_samples(20, 9000))
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 4096 * 3)
    with pytest.raises(CorruptShardError, match="truncated") as caught:
        FMT.open_reader(str(path), SCHEMA)
    assert str(path) in str(caught.value)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.lmdb"
    empty.write_bytes(b"")
    for path in (empty, tmp_path / "missing.lmdb"):
        with pytest.raises(CorruptShardError) as caught:
            FMT.open_reader(str(path), SCHEMA)
        assert str(path) in str(caught.value)
    assert not (tmp_path / "missing.lmdb").exists()


def test_closed_dataset_lets_py_lmdb_open_its_files(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    shardkit.convert(str(image_tree), str(dst), format="lmdb", samples_per_shard=40, quiet=True)
    first = sorted((dst / "shards").iterdir())[0]
    with shardkit.open_dataset(dst, decode=None) as ds:
        expected = _payload(ds.read_encoded(3))
        with pytest.raises(lmdb.Error):         # py-lmdb allows one environment per file and process
            lmdb.open(str(first), subdir=False, readonly=True, lock=False)
    env = lmdb.open(str(first), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        assert bytes(txn.get(sample_key(3)))[RECORD.size:] == expected
    env.close()


def test_a_second_readahead_on_an_open_file_is_refused_not_ignored(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    shardkit.convert(str(image_tree), str(dst), format="lmdb", samples_per_shard=40, quiet=True)
    with shardkit.open_dataset(dst, decode=None, readahead=False) as off:
        off[0]
        on = shardkit.open_dataset(dst, decode=None, readahead=True)
        with pytest.raises(UsageError, match="readahead=False"):
            on[0]
    assert on.shard_cache.reader(0).readahead is True       # once the other dataset is closed
    on.close()


def test_peek_reads_count_and_identity_from_the_metadata_record(tmp_path: Path) -> None:
    """verify --quick's peek: the reader's count and dataset_id, from one lookup; a truncated file
    is refused before any page past its end is read. (Mutation: no truncation check: this fails.)"""
    samples = sized_samples(30, 5000)
    path = tmp_path / "s.lmdb"
    _write(path, samples)
    reader = FMT.open_reader(str(path), SCHEMA)
    expected = (len(reader), reader.dataset_id)
    reader.close()
    assert FMT.peek(str(path), SCHEMA) == expected == (30, expected[1])
    shared = FMT.open_reader(str(path), SCHEMA, ReadaheadOptions(False))   # peek takes an open one as it is
    assert FMT.peek(str(path), SCHEMA) == expected
    shared.close()
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)
    with pytest.raises(CorruptShardError, match="truncated"):
        FMT.peek(str(path), SCHEMA)
    assert not [fd for fd in os.listdir("/proc/self/fd") if _names(fd, path)]     # nothing left open


def _names(fd: str, path: Path) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == str(path)
    except OSError:
        return False


class _Cycle:
    """An object kept alive only by a reference cycle: freed by the cyclic garbage collector."""


def test_a_reader_collected_while_another_environment_opens_does_not_deadlock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataset dropped without close() leaves a reader whose finalizer gives its environment
    back; the collector may run it while this thread is opening another environment."""
    import gc
    import threading
    from shardkit.formats import lmdb_env
    for name in ("a", "b"):
        _write(tmp_path / f"{name}.lmdb", sized_samples(3, 100))
    holder = _Cycle()
    holder.self, holder.reader = holder, FMT.open_reader(str(tmp_path / "a.lmdb"), SCHEMA)
    del holder
    opening = lmdb_env.SharedEnv.__init__

    def collecting(self: Any, *args: Any) -> None:      # the collector runs inside acquire
        gc.collect()
        opening(self, *args)
    monkeypatch.setattr(lmdb_env.SharedEnv, "__init__", collecting)
    done = threading.Event()

    def open_b() -> None:
        FMT.open_reader(str(tmp_path / "b.lmdb"), SCHEMA).close()
        done.set()
    threading.Thread(target=open_b, daemon=True).start()
    assert done.wait(30), "opening an environment deadlocked on a finalizer"


@pytest.mark.parametrize("batch_samples, batch_bytes", [(17, 1 << 30), (1 << 20, 1000), (9, 1500)])
def test_the_batch_is_written_where_it_fills_however_the_records_arrive(tmp_path: Path, batch_samples: int,
                                                                        batch_bytes: int,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One write transaction per batch: after the record that takes it to BATCH_SAMPLES records or
    to BATCH_BYTES bytes, then the rest and the tables at close; runs of any length (append_many)
    and single records alike. Mutations: a batch one record longer, or cut one record later."""
    from shardkit.records import EncodedRows
    monkeypatch.setattr(lmdb_format, "BATCH_SAMPLES", batch_samples)
    monkeypatch.setattr(lmdb_format, "BATCH_BYTES", batch_bytes)
    schema = SampleSchema(kind="image")
    payloads = [bytes([n % 251]) * (50 + n * 7 % 90) for n in range(200)]
    writer = get_format("lmdb").open_writer(str(tmp_path / "s.lmdb"), schema, get_format("lmdb").writer_options())
    start = 0
    for length in [1, 40, 0, 3, 77, 1, 1, 200]:
        run = payloads[start:start + length]
        writer.append_many(EncodedRows(run, [0] * len(run), [zlib.crc32(one) for one in run], ["k"] * len(run)))
        start += len(run)
    writer.close()
    transactions, held, size = 0, 0, 0
    for payload in payloads:
        held, size = held + 1, size + RECORD.size + len(payload)
        if held >= batch_samples or size >= batch_bytes:
            transactions, held, size = transactions + 1, 0, 0
    transactions += (1 if held else 0) + 1          # the rest, then the tables
    env = lmdb.open(str(tmp_path / "s.lmdb"), subdir=False, readonly=True, lock=False)
    try:
        assert env.info()["last_txnid"] == transactions
    finally:
        env.close()
