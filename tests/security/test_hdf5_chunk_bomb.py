"""A chunk is inflated whole on every read, and HDF5's filters inflate whatever a stream holds. So a
shard's /data must have exactly the writer's filter pipeline, chunks no larger than the writer cuts
(checked against the schema), every chunk stored in no more than its filter writes, and a chunk is
inflated by shardkit into its logical size, never past it: a crafted chunk costs at most one chunk
of memory, on open, on every read and in verify --deep."""
from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Callable, Dict

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
    """size zero bytes deflated `times` over, at level 9. After a sync flush, each further 8 MiB of
    zeros deflates to the same bytes, so a large stream is that piece repeated, then the rest and
    the zeros' Adler-32: 1 GiB costs a fraction of a second, not the many seconds of deflating it
    all (test_zero_streams_inflate_to_zeros checks the shortcut)."""
    step = 8 << 20
    pieces, rest = divmod(size, step)
    if pieces < 3:
        out = zlib.compress(bytes(size), 9)
    else:
        deflater = zlib.compressobj(9)
        first, middle, again = (deflater.compress(bytes(step)) + deflater.flush(zlib.Z_SYNC_FLUSH)
                                for _ in range(3))
        assert again == middle, "the deflater's output for 8 MiB of zeros did not settle"
        close = (deflater.compress(bytes(rest)) + deflater.flush(zlib.Z_FINISH))[:-4]
        out = first + middle * (pieces - 1) + close + struct.pack(">I", (size % 65521) << 16 | 1)
    for _ in range(times - 1):
        out = zlib.compress(out, 9)
    return out


def test_zero_streams_inflate_to_zeros() -> None:
    for size, times in ((1 << 20, 1), (25 << 20, 1), (35 << 20, 2)):
        stream = _zeros_deflated(size, times)
        for _ in range(times - 1):
            stream = zlib.decompress(stream)
        assert zlib.decompress(stream) == bytes(size)


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

#: Reads each dataset given in one child whose address space is capped at 1 GiB, so a bomb that gets
#: through fails there instead of taking the machine's memory; prints, per dataset, what it saw
#: and how far the child's peak memory grew from before it (the peak only rises: a bomb in any
#: dataset shows in its own line and every later one).
READ = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
import shardkit, torch.utils.data  # noqa: E401 - imported before the baseline: the dataset's own import
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
before = peak()
for dst in sys.argv[1:]:
    try:
        seen = {"verify": [problem.message for problem in shardkit.verify(dst, mode="deep", workers=1).problems]}
    except Exception as exc:        # a bomb that got through: this dataset's test fails, not every one
        seen = {"verify": [f"verify raised {type(exc).__name__} {exc}"]}
    try:
        shardkit.open_dataset(dst, decode=None)[0]
        seen["read"] = "no error"
    except Exception as exc:
        seen["read"] = f"{type(exc).__name__} {exc}"
    seen["grew"] = peak() - before
    print(json.dumps(seen), flush=True)
"""


@pytest.fixture(scope="module")
def crafted_reads(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Dict]:
    """Every case's crafted dataset, read by one capped child: case -> what it saw."""
    dsts = {}
    for case, (change, _) in sorted(CASES.items()):
        dsts[case] = raw_gzip_dataset(tmp_path_factory.mktemp(case), change)
        assert (dsts[case] / "shards" / "shard-00000.h5").stat().st_size < 4 * ROW      # a few rows at most
    result = subprocess.run([sys.executable, "-c", READ, *map(str, dsts.values())], env=cli_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(zip(dsts, map(json.loads, result.stdout.splitlines())))


@pytest.mark.parametrize("case", sorted(CASES))
def test_crafted_chunks_never_inflate_past_one_chunk(crafted_reads: Dict[str, Dict], case: str) -> None:
    """Mutations: _check_filters accepting any pipeline of built-in filters (double_deflate,
    shuffle_added); _check_storage's /data limit back to MAX_CHUNK_BYTES (chunk_over_the_schema_limit);
    InflatedChunks._check_index without the stored-size bound (chunk_stored_past_its_bound);
    _inflate_zlib without max_length (stream_past_its_chunk); the reader reading compressed /data
    through h5py again (stream_past_its_chunk, double_deflate)."""
    reason = CASES[case][1]
    seen = crafted_reads[case]
    problems = " ".join(seen["verify"])
    assert "shard-00000.h5" in problems and re.search(reason, problems), seen
    assert seen["read"].startswith(("CorruptShardError", "CorruptSampleError")), seen
    assert re.search(reason, seen["read"]), seen
    assert seen["grew"] < 64 << 20, seen


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
