"""A per-sample fault found inside a format is a CorruptSampleError naming the shard and the
sample, with a message built from those fields, in the reader, the dataset, verify and re-sharding."""
from __future__ import annotations

import pickle
import zlib
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import CorruptSampleError
from shardkit.formats.packing import DEFAULT_GZIP_LEVEL
from shardkit.handles import HANDLES

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
    HANDLES.close_all()
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
    HANDLES.close_all()


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
