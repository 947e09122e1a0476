"""Fixtures of the read-side tests: small datasets of fixed-shape rows and of encoded images."""
from __future__ import annotations

from pathlib import Path

import pytest

import shardkit

from ..faults.helpers import make_tiny_tree

ROWS, PER_SHARD = 60, 5


def row_value(i: int) -> "tuple[float, float]":
    """The two features of table row i, as written by rows_dataset."""
    return float(i), i * 0.5 + 1000.0


@pytest.fixture()
def rows_dataset(tmp_path: Path, fmt: str) -> Path:
    """A table of ROWS rows (two float features, label i % 3) in shards of PER_SHARD rows."""
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,label\n" + "".join(f"{a},{b},c{i % 3}\n" for i in range(ROWS) for a, b in [row_value(i)]))
    dst = tmp_path / "rows"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=PER_SHARD,
                     order="source", quiet=True)
    return dst


@pytest.fixture()
def images_dataset(tmp_path: Path, fmt: str) -> Path:
    """24 small encoded images (passthrough) in shards of 4."""
    src = tmp_path / "src"
    make_tiny_tree(src, 24, seed=3)
    dst = tmp_path / "images"
    shardkit.convert(str(src), str(dst), format=fmt, samples_per_shard=4, quiet=True)
    return dst
