"""A chunk is inflated whole on every read, and HDF5's filters inflate whatever a stream holds. So a
shard's /data must have exactly the writer's filter pipeline, chunks no larger than the writer cuts
(checked against the schema), every chunk stored in no more than its filter writes, and a chunk is
inflated by shardkit into its logical size, never past it: a crafted chunk costs at most one chunk
of memory, on open, on every read and in verify --deep."""
from __future__ import annotations

import re
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Callable

import h5py
import numpy as np
import pytest

import shardkit
from shardkit.errors import CorruptShardError
from shardkit.formats.hdf5_layout import ARRAY_CHUNK
from tests.faults.crafting import reseal
from tests.faults.helpers import cli_env
from tests.security.crafted import one_image_dataset

#: Raw 256x256 RGB rows: 192 KiB each, so a gzip chunk is one row (more than ARRAY_CHUNK["gzip"]).
SIDE = 256
ROW = SIDE * SIDE * 3


def raw_gzip_dataset(tmp_path: Path, change: Callable[[h5py.File], None]) -> Path:
    """A one-image raw dataset stored with gzip whose shard was changed in place and resealed."""
    dst = one_image_dataset(tmp_path, "hdf5", image_mode="raw", size=(SIDE, SIDE), compression="gzip")
    with h5py.File(dst / "shards" / "shard-00000.h5", "r+") as handle:
        change(handle)
    reseal(dst)
    return dst


def _data_with(handle: h5py.File, rows: int, chunk_rows: int, filters: Callable[[h5py.h5p.PropDCID], None]):
    """/data replaced by a dataset of `rows` rows in chunks of `chunk_rows`, with the given filters."""
    del handle["data"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((chunk_rows, SIDE, SIDE, 3))
    filters(dcpl)
    space = h5py.h5s.create_simple((rows, SIDE, SIDE, 3), (h5py.h5s.UNLIMITED, SIDE, SIDE, 3))
    return h5py.h5d.create(handle.id, b"data", h5py.h5t.py_create(np.dtype("u1")), space, dcpl=dcpl)


def _zeros_deflated(size: int, times: int = 1) -> bytes:
    """size zero bytes deflated `times` over (streamed: the zeros are never held at once)."""
    step = 1 << 20
    deflater = zlib.compressobj(9)
    pieces = [deflater.compress(bytes(min(step, size - at))) for at in range(0, size, step)]
    out = b"".join(pieces) + deflater.flush()
    for _ in range(times - 1):
        out = zlib.compress(out, 9)
    return out


def double_deflate(handle: h5py.File) -> None:
    """The deflate filter listed twice; the one chunk is 1 GiB of zeros deflated twice (2 KB)."""
    def filters(dcpl: h5py.h5p.PropDCID) -> None:
        dcpl.set_deflate(9)
        dcpl.set_deflate(9)
    _data_with(handle, 1, 1, filters).write_direct_chunk((0, 0, 0, 0), _zeros_deflated(1 << 30, times=2))


def stream_past_its_chunk(handle: h5py.File) -> None:
    """The writer's pipeline and chunk, but the chunk's one deflate stream (stored in no more than
    a chunk's compressBound) inflates to ~190 MiB of zeros."""
    stream = _zeros_deflated(190 << 20)
    assert len(stream) < ROW
    _data_with(handle, 1, 1, lambda dcpl: dcpl.set_deflate(4)).write_direct_chunk((0, 0, 0, 0), stream)


def shuffle_added(handle: h5py.File) -> None:
    """Shuffle before deflate: built into HDF5, never written by shardkit."""
    def filters(dcpl: h5py.h5p.PropDCID) -> None:
        dcpl.set_shuffle()
        dcpl.set_deflate(4)
    _data_with(handle, 1, 1, filters).write_direct_chunk((0, 0, 0, 0), zlib.compress(bytes(ROW)))


def chunk_stored_past_its_bound(handle: h5py.File) -> None:
    """A chunk stored in more bytes than deflate ever writes for it (a stream and trailing bytes)."""
    stored = zlib.compress(bytes(ROW)) + bytes(2 * ROW)
    _data_with(handle, 1, 1, lambda dcpl: dcpl.set_deflate(4)).write_direct_chunk((0, 0, 0, 0), stored)


def chunk_over_the_schema_limit(handle: h5py.File) -> None:
    """Eight rows in one chunk (1.5 MiB of zeros, KBs stored): the writer's gzip chunk of such rows is one."""
    dset = _data_with(handle, 8, 8, lambda dcpl: dcpl.set_deflate(4))
    dset.write_direct_chunk((0, 0, 0, 0), _zeros_deflated(8 * ROW))


def chunk_larger_than_the_data(handle: h5py.File) -> None:
    """A chunk of 4 rows for a dataset of one: HDF5 inflates the whole chunk on each read."""
    dset = _data_with(handle, 1, 4, lambda dcpl: dcpl.set_deflate(4))
    dset.write_direct_chunk((0, 0, 0, 0), _zeros_deflated(4 * ROW))


#: Each case, with what the refusal says: at open (structure) or at the read of the chunk.
CASES = {
    "double_deflate": (double_deflate, "filter pipeline \\[1, 1\\], expected \\[1\\]"),
    "shuffle_added": (shuffle_added, "filter pipeline \\[2, 1\\], expected \\[1\\]"),
    "chunk_over_the_schema_limit": (chunk_over_the_schema_limit, "chunks may not exceed the dataset or"),
    "chunk_larger_than_the_data": (chunk_larger_than_the_data, "chunks may not exceed the dataset"),
    "chunk_stored_past_its_bound": (chunk_stored_past_its_bound, "chunk 0 is stored in"),
    "stream_past_its_chunk": (stream_past_its_chunk, "does not hold exactly the chunk's 196608 bytes"),
}

#: Reads the dataset in a child whose address space is capped at 1 GiB, so a bomb that gets
#: through fails there instead of taking the machine's memory; prints what it saw and its growth.
READ = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
import shardkit, torch.utils.data  # noqa: E401 - imported before the baseline: the dataset's own import
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
before = peak()
report = shardkit.verify(sys.argv[1], mode="deep", workers=1)
print("verify:", [problem.message for problem in report.problems])
try:
    shardkit.open_dataset(sys.argv[1], decode=None)[0]
    print("read: no error")
except Exception as exc:
    print("read:", type(exc).__name__, exc)
print("grew:", peak() - before)
"""


@pytest.mark.parametrize("case", sorted(CASES))
def test_crafted_chunks_never_inflate_past_one_chunk(tmp_path: Path, case: str) -> None:
    """Mutations: _check_filters accepting any pipeline of built-in filters (double_deflate,
    shuffle_added); _check_storage's /data limit back to MAX_CHUNK_BYTES (chunk_over_the_schema_limit);
    InflatedChunks._check_index without the stored-size bound (chunk_stored_past_its_bound);
    _inflate_zlib without max_length (stream_past_its_chunk); the reader reading compressed /data
    through h5py again (stream_past_its_chunk, double_deflate)."""
    change, reason = CASES[case]
    dst = raw_gzip_dataset(tmp_path, change)
    assert (dst / "shards" / "shard-00000.h5").stat().st_size < 4 * ROW      # a few rows at most
    result = subprocess.run([sys.executable, "-c", READ, str(dst)], env=cli_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert "shard-00000.h5" in lines["verify"], lines
    assert re.search(reason, lines["verify"]), lines
    assert lines["read"].startswith(("CorruptShardError", "CorruptSampleError")), lines
    assert re.search(reason, lines["read"]), lines
    assert int(lines["grew"]) < 64 << 20, lines


def test_compressed_shards_read_the_same_through_bounded_chunks(tmp_path: Path) -> None:
    """gzip and lzf rows read by shardkit's own decoders equal what h5py reads, across chunks,
    one by one and batched (raw 8x8 rows: many rows to a chunk)."""
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    from tests.security.crafted import png_bytes
    for number in range(400):
        (src / f"{number:03d}.png").write_bytes(png_bytes(colour=(number % 256, number // 256, 7)))
    for compression in ("gzip", "lzf"):
        dst = tmp_path / compression
        shardkit.convert(str(tmp_path / "src"), str(dst), format="hdf5", image_mode="raw", size=(8, 8),
                         compression=compression, order="source", quiet=True)
        with h5py.File(dst / "shards" / "shard-00000.h5", "r") as handle:
            expected = handle["data"][()]
            assert 1 < handle["data"].chunks[0] <= ARRAY_CHUNK[compression] // 192 < len(expected)
        dataset = shardkit.open_dataset(dst, decode=None, verify_checksums=True)
        assert all(np.array_equal(dataset[i][0], expected[i]) for i in range(0, len(expected), 7))
        batch = dataset.__getitems__(list(range(len(expected) - 1, -1, -3)))
        assert all(np.array_equal(sample, expected[i]) for (sample, _), i in
                   zip(batch, range(len(expected) - 1, -1, -3)))


def test_an_edited_chunk_is_named_not_served(tmp_path: Path) -> None:
    """A chunk whose stream is cut short is a damaged chunk of that shard, not zeros."""
    def cut_stream(handle: h5py.File) -> None:
        stream = zlib.compress(np.arange(ROW, dtype=np.uint8).tobytes())
        _data_with(handle, 1, 1, lambda dcpl: dcpl.set_deflate(4)).write_direct_chunk((0, 0, 0, 0), stream[:-9])
    dst = raw_gzip_dataset(tmp_path, cut_stream)
    with pytest.raises((CorruptShardError, shardkit.CorruptSampleError), match="shard-00000.h5.*chunk 0"):
        shardkit.open_dataset(dst, decode=None)[0]
