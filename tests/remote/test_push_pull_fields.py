"""push and pull of a dataset of named fields (docs/fields.md): every field's files and sample
tables go up before the manifest and come back byte for byte."""
from __future__ import annotations

from pathlib import Path

import numpy as np

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
