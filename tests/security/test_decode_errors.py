"""Stored bytes that Pillow refuses at read time reach the caller as one CorruptSampleError
naming the shard and the sample, never as a Pillow exception: data truncated before its CRC32
was computed (so the CRC passes), and a valid image in a format the manifest does not allow."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image

import shardkit
from shardkit.errors import CorruptSampleError
from tests.security.crafted import one_image_dataset, png_bytes

SHARD = {"hdf5": "shards/shard-00000.h5", "lmdb": "shards/shard-00000.lmdb", "pt": "shards/shard-00000.pt"}


def _gif() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (1, 2, 3)).save(out, "GIF")
    return out.getvalue()


def _truncated_png() -> bytes:
    whole = png_bytes(64)
    return whole[:len(whole) // 2]


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb", "pt"])
@pytest.mark.parametrize("decode", ["pil", "numpy", "tensor"])
@pytest.mark.parametrize("payload, problem", [(_truncated_png(), "does not decode"),
                                              (_gif(), "allowed format")], ids=["truncated", "gif-in-png"])
def test_undecodable_sample_is_a_corrupt_sample(tmp_path: Path, fmt: str, decode: str, payload: bytes,
                                                problem: str) -> None:
    dst = one_image_dataset(tmp_path, fmt, payload=payload)
    ds = shardkit.open_dataset(dst, decode=decode, verify_checksums=True)     # the CRC32 passes
    with pytest.raises(CorruptSampleError, match=problem) as caught:
        ds[0]
    error = caught.value
    assert (error.shard, error.index, error.global_index) == (SHARD[fmt], 0, 0)
    assert str(error).startswith(str(dst / SHARD[fmt])) and "\n" not in str(error)
    assert shardkit.open_dataset(dst, decode=None)[0][0] == payload      # the stored bytes are as written


def test_streamed_reads_name_the_sample_too(tmp_path: Path) -> None:
    dst = one_image_dataset(tmp_path, "pt", payload=_truncated_png())
    with pytest.raises(CorruptSampleError, match="does not decode") as caught:
        list(shardkit.ShardStream(dst, shuffle=False))
    assert (caught.value.shard, caught.value.global_index) == (SHARD["pt"], 0)
