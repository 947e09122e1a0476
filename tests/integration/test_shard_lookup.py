"""A global index finds its shard and row whether the shards hold equal counts (found by a
division) or not (found by bisection), in every format and for fixed-shape rows read as one view."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import pytest

import shardkit


def _walk_keys(ds: shardkit.ShardDataset) -> List[str]:
    """Every key shard by shard through the readers, without the global lookup under test."""
    counts = np.diff(ds.shard_starts).tolist()
    return [ds.shard_cache.reader(shard).key(local) for shard, count in enumerate(counts) for local in range(count)]


@pytest.mark.parametrize("cut", [{"shard_size": "100KB"}, {"samples_per_shard": 7}])
def test_every_index_reads_its_own_sample(image_tree: Path, tmp_path: Path, fmt: str, cut: dict) -> None:
    dst = tmp_path / "dst"
    shardkit.convert(str(image_tree), str(dst), format=fmt, quiet=True, **cut)
    with shardkit.open_dataset(dst, decode=None, return_key=True) as ds:
        counts = np.diff(ds.shard_starts)
        if "shard_size" in cut:     # shards cut by bytes hold different counts: the bisection path
            assert len(set(counts[:-1].tolist())) > 1, counts
        else:                       # equal shards and a shorter last one: the division path
            assert set(counts[:-1].tolist()) == {7} and counts[-1] < 7
        expected = _walk_keys(ds)
        order = np.random.default_rng(0).permutation(len(ds)).tolist()
        for index in order:
            payload, _, key = ds[index]
            assert key == expected[index]
            assert bytes(memoryview(payload)) == (image_tree / key).read_bytes()
        with pytest.raises(IndexError):
            ds[len(ds)]


def test_fixed_shape_rows_read_as_one_view_match_the_table(tmp_path: Path, fmt: str) -> None:
    csv = tmp_path / "src.csv"
    rows = np.random.default_rng(2).random((50, 3)).round(4)
    csv.write_text("a,b,c,label\n" + "".join(f"{a},{b},{c},{i % 3}\n" for i, (a, b, c) in enumerate(rows)))
    dst = tmp_path / "dst"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=8, quiet=True)
    with shardkit.open_dataset(dst, decode=None, verify_checksums=True) as ds:
        got = np.stack([np.asarray(ds[i][0]) for i in range(len(ds))])
        assert np.array_equal(got, rows.astype(np.float32))
        assert [ds[i][1] for i in range(len(ds))] == [i % 3 for i in range(len(ds))]
        assert np.array_equal(np.asarray(ds[-1][0]), rows[-1].astype(np.float32))
        reader = ds.shard_cache.reader(0)
        with pytest.raises(IndexError):
            reader.read(8)
        with pytest.raises(IndexError):
            reader.read(-1)
