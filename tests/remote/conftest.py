"""Fixtures of the remote tests: moto's S3 server and a misbehaving HTTP server, both on 127.0.0.1,
and small datasets to move (a table of 50 shards converts in a fraction of a second)."""
from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Iterator

import pytest

import shardkit

from .servers import FaultyFolderServer, S3Server

# Retries wait 0.5 s, then 1 s, ... in real use; here a few milliseconds, so faults test quickly.
os.environ["SHARDKIT_RETRY_DELAY"] = "0.01"
# gcsfs asks a gRPC service for each bucket's layout unless told not to at its import; the Cloud
# Storage emulator of test_gcs.py has none (each ask would wait a minute)
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """moto's S3 server, one per test process."""
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """A new, empty bucket."""
    return s3.new_bucket()


def table_dataset(root: Path, shards: int, rows_per_shard: int = 10, fmt: str = "hdf5") -> Path:
    """A converted table of `shards` shards of `rows_per_shard` rows (four float columns and a label)."""
    root.mkdir(parents=True, exist_ok=True)
    src = root / "table.csv"
    with open(src, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "b", "c", "d", "label"])
        for row in range(shards * rows_per_shard):
            writer.writerow([row, row * 0.5, -row, row % 7, f"class{row % 3}"])
    dst = root / f"dataset-{fmt}"
    shardkit.convert(str(src), str(dst), format=fmt, label_column="label", samples_per_shard=rows_per_shard,
                     order="source", quiet=True, workers=1)
    return dst


@pytest.fixture(scope="session")
def table50(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 50-shard table dataset (read-only)."""
    return table_dataset(tmp_path_factory.mktemp("table50"), shards=50)


@pytest.fixture
def served(tmp_path: Path, table50: Path) -> Iterator[FaultyFolderServer]:
    """The HTTP server of a folder holding a copy of table50 at /ds (the copy may be damaged)."""
    import shutil
    shutil.copytree(table50, tmp_path / "site" / "ds")
    with FaultyFolderServer(tmp_path / "site") as server:
        yield server


def files_of(root: Path) -> dict:
    """Every file under root (relative path -> bytes)."""
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def disk_use(root: Path) -> int:
    """Bytes of the files under root."""
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
