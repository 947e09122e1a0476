"""HDF5 reads served from the mmap: right bytes across the gaps HDF5 leaves between chunk runs."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from shardkit.formats import hdf5, hdf5_layout
from shardkit.records import Encoded
from shardkit.schema import SampleSchema


def _chunk_offsets(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as handle:
        dsid = handle["data"].id
        return np.array([dsid.get_chunk_info(k).byte_offset for k in range(dsid.get_num_chunks())])


def _write(path: Path, schema: SampleSchema, payloads: list) -> None:
    writer = hdf5.FORMAT.open_writer(str(path), schema, hdf5.FORMAT.writer_options())
    for number, payload in enumerate(payloads):
        writer.append(Encoded.make(payload, number % 3))
    writer.close()


def test_bytes_layout_reads_every_sample_across_chunk_gaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(hdf5_layout.BYTES_CHUNK, "none", 4096)   # small chunks: > 64 of them, so index nodes interleave
    rng = np.random.default_rng(3)
    payloads = [rng.integers(0, 256, int(rng.integers(0, 9000)), dtype=np.uint8).tobytes() for _ in range(120)]
    path = tmp_path / "shard.h5"
    schema = SampleSchema(kind="image")
    _write(path, schema, payloads)
    gaps = np.flatnonzero(np.diff(_chunk_offsets(path)) != 4096) + 1    # chunks that start a new run
    assert len(gaps), "the layout under test must have a gap between chunk runs"
    ends = np.cumsum([len(p) for p in payloads])
    starts = ends - [len(p) for p in payloads]
    assert any(((starts < k * 4096) & (ends > k * 4096)).any() for k in gaps), "a sample must straddle a gap"
    reader = hdf5.FORMAT.open_reader(str(path), schema)
    try:
        assert reader._flat is not None   # served from the mmap, not through h5py
        for index, expected in enumerate(payloads):
            sample = reader.read(index)
            assert bytes(sample.payload) == expected
            assert sample.label == index % 3 and sample.crc_ok()
    finally:
        reader.close()


def test_array_layout_reads_every_sample_across_chunk_gaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(hdf5_layout.ARRAY_CHUNK, "none", 2 * 48)   # two 4x4x3 samples per chunk
    rng = np.random.default_rng(4)
    arrays = [rng.integers(0, 256, (4, 4, 3), dtype=np.uint8) for _ in range(301)]
    path = tmp_path / "shard.h5"
    schema = SampleSchema(kind="image", layout="array", shape=(4, 4, 3))
    _write(path, schema, arrays)
    assert (np.diff(_chunk_offsets(path)) != 96).any()
    reader = hdf5.FORMAT.open_reader(str(path), schema)
    try:
        assert reader._flat is not None
        for index in (0, 1, 127, 128, 129, 255, 300):
            sample = reader.read(index)
            assert sample.payload.shape == (4, 4, 3)
            np.testing.assert_array_equal(sample.payload, arrays[index])
    finally:
        reader.close()


def test_compressed_data_is_read_through_h5py(tmp_path: Path) -> None:
    payloads = [bytes([k]) * (100 + k) for k in range(20)]
    path = tmp_path / "shard.h5"
    schema = SampleSchema(kind="image", compression="gzip")
    _write(path, schema, payloads)
    reader = hdf5.FORMAT.open_reader(str(path), schema)
    try:
        assert reader._flat is None
        assert [bytes(reader.read(k).payload) for k in range(20)] == payloads
    finally:
        reader.close()
