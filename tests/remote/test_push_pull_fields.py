"""push and pull of a dataset of named fields (docs/fields.md): every field's files and sample
tables go up before the manifest and come back byte for byte."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shardkit

from .conftest import files_of
from .servers import S3Server


def test_a_dataset_of_fields_round_trips(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    """Mutation: push listing manifest.shards (the shards as units) instead of every field's files
    fails this test."""
    samples = [{"text": f"t{n}", "vec": np.full((n % 3, 2), n, np.float32)} for n in range(9)]
    fields = {"text": "text", "vec": {"type": "array", "dtype": "float32", "shape": [None, 2]}}
    shardkit.write(samples, tmp_path / "source", fields, samples_per_shard=4)
    url = f"s3://{bucket}/datasets/fields"
    pushed = shardkit.push(str(tmp_path / "source"), url, storage_options=s3.options())
    assert pushed.uploaded == 3 * 3 + 3          # 3 shards of 3 columns, and 3 sample tables
    pulled = shardkit.pull(url, str(tmp_path / "back"), storage_options=s3.options())
    assert pulled.fetched == 9
    assert files_of(tmp_path / "back") == files_of(tmp_path / "source")
    assert shardkit.verify(str(tmp_path / "back"), mode="deep").ok


def test_reading_a_dataset_of_fields_at_a_url_says_to_pull_it(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    """A dataset of named fields is read from local disk: at a URL, one line saying so, and nothing
    fetched beyond its manifest into the cache."""
    shardkit.write([{"text": f"t{n}"} for n in range(5)], tmp_path / "source", {"text": "text"})
    url = f"s3://{bucket}/datasets/fields-read"
    shardkit.push(str(tmp_path / "source"), url, storage_options=s3.options())
    cache = tmp_path / "cache"
    with pytest.raises(shardkit.UsageError, match="shardkit pull") as raised:
        shardkit.open_dataset(url, cache_dir=str(cache), storage_options=s3.options())
    assert "\n" not in str(raised.value) and url in str(raised.value)
    assert not [path for path in cache.rglob("*") if path.is_file() and path.suffix != ".lock"
                and "manifest" not in path.name]
