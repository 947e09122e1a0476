"""HDF5 raw-mode layout: chunks sized so that one random read decompresses about one sample."""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

import shardkit
from shardkit.formats.hdf5_layout import ARRAY_CHUNK

MIB = 1 << 20


@pytest.mark.parametrize("size", [(224, 224), (16, 16)])
@pytest.mark.parametrize("compression", ["none", "gzip", "lzf"])
def test_raw_chunks_hold_about_one_sample(odd_tree: Path, tmp_path: Path, size: tuple, compression: str) -> None:
    dst = tmp_path / "ds"
    shardkit.convert(str(odd_tree), str(dst), format="hdf5", image_mode="raw", size=size,
                     compression=compression, quiet=True)
    manifest = json.loads((dst / "manifest.json").read_text())
    sample_bytes = size[0] * size[1] * 3
    for entry in manifest["shards"]:
        with h5py.File(dst / entry["path"], "r") as handle:
            data = handle["data"]
            assert data.shape == (entry["num_samples"], *size, 3) and data.dtype == np.uint8
            assert data.chunks[1:] == (*size, 3)               # a chunk is whole samples
            chunk_bytes = data.chunks[0] * sample_bytes
            assert chunk_bytes <= max(sample_bytes, MIB)
            assert data.compression == (None if compression == "none" else compression)
            if compression != "none":
                # One sample's read decompresses one chunk: the format's target or one sample.
                per_chunk = max(1, ARRAY_CHUNK[compression] // sample_bytes)
                assert data.chunks[0] == min(per_chunk, data.shape[0])
    ds = shardkit.open_dataset(dst, decode=None, verify_checksums=True)
    for index in range(len(ds)):
        assert ds[index][0].shape == (*size, 3)


def test_uncompressed_raw_reads_are_views_of_the_mapped_file(odd_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "ds"
    shardkit.convert(str(odd_tree), str(dst), format="hdf5", image_mode="raw", size=(32, 32), quiet=True)
    array = shardkit.open_dataset(dst, decode="numpy")[0][0]
    assert not array.flags.owndata and not array.flags.writeable      # zero-copy, and safe
    gz = tmp_path / "gz"
    shardkit.convert(str(odd_tree), str(gz), format="hdf5", image_mode="raw", size=(32, 32),
                     compression="gzip", quiet=True)
    fresh = shardkit.open_dataset(gz, decode="numpy")[0][0]
    assert fresh.flags.owndata and np.array_equal(fresh, array)      # decompressed into a new array
