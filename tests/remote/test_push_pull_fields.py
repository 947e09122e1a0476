"""push, pull and reads at a URL of a dataset of named fields (docs/fields.md): every field's files
and sample tables go up before the manifest and come back byte for byte, and read through the
shard cache as the local copy reads."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch.utils.data

import shardkit

from .conftest import disk_use, files_of
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


def test_a_dataset_of_fields_at_a_url_reads_as_its_local_copy(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    """Each column's files come through one cache folder under one limit: fields= fetches only the
    columns read; a limit of one whole shard (every column's file of it) still reads every sample,
    from DataLoader workers too, the folder never past the limit plus the shard being read.
    Mutations: a column's cache given the whole dataset's manifest; open shards not bounded by the
    limit."""
    samples = [{"text": f"t{n}", "vec": np.full((n % 3, 2), n, np.float32), "n": n} for n in range(40)]
    fields = {"text": "text", "vec": {"type": "array", "dtype": "float32", "shape": [None, 2]}, "n": "int"}
    shardkit.write(samples, tmp_path / "source", fields, samples_per_shard=8, order="source")
    url = f"s3://{bucket}/datasets/fields-read"
    shardkit.push(str(tmp_path / "source"), url, storage_options=s3.options())
    local = shardkit.open_dataset(tmp_path / "source")

    with shardkit.open_dataset(url, cache_dir=tmp_path / "text-only", fields=("text",),
                               storage_options=s3.options()) as texts:
        assert texts.root == url
        assert [texts[i] for i in range(len(texts))] == [(f"t{n}",) for n in range(40)]
    manifest = json.loads((tmp_path / "source" / "manifest.json").read_text())
    text_files = {shard["files"]["text"]["sha256"] for shard in manifest["shards"]}
    tables = manifest.get("sample_tables", {})
    text_files |= {tables["text"]["sha256"]} if "text" in tables else set()
    cached = {path.name.split("-")[0] for path in (tmp_path / "text-only" / "objects").iterdir()}
    assert cached == text_files

    whole_shard = max(sum(item["size"] for item in shard["files"].values()) for shard in manifest["shards"])
    limit = whole_shard + 4096
    ds = shardkit.open_dataset(url, cache_dir=tmp_path / "cache", cache_limit=limit, storage_options=s3.options())
    for index in range(39, -1, -3):
        got, want = ds[index], local[index]
        assert got["text"] == want["text"] and got["n"] == want["n"] and np.array_equal(got["vec"], want["vec"])
        assert disk_use(tmp_path / "cache") <= limit + whole_shard, index
    loader = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=2, collate_fn=list)
    assert sorted(sample["n"] for batch in loader for sample in batch) == list(range(40))
    ds.close()
