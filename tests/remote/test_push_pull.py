"""push and pull against moto's S3 server on 127.0.0.1: a dataset goes up verified, shards before
its manifest, and comes back byte for byte as a dataset that verify accepts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main

from .conftest import files_of, table_dataset
from .servers import S3Server


def test_round_trip_through_s3_is_byte_identical(s3: S3Server, bucket: str, fmt: str, tmp_path: Path) -> None:
    dataset_dir = table_dataset(tmp_path / "source", shards=4, fmt=fmt)
    url = f"s3://{bucket}/datasets/one"
    pushed = shardkit.push(str(dataset_dir), url, storage_options=s3.options())
    manifest = json.loads((dataset_dir / "manifest.json").read_text())
    assert pushed.uploaded == len(manifest["shards"]) + ("sample_table" in manifest)
    assert pushed.to_dict()["url"] == url
    stored = s3.keys(bucket)
    assert stored["datasets/one/manifest.json"] == (dataset_dir / "manifest.json").read_bytes()
    pulled = shardkit.pull(url, str(tmp_path / "back"), storage_options=s3.options())
    assert (pulled.fetched, pulled.reused) == (len(manifest["shards"]), 0)
    assert files_of(tmp_path / "back") == {rel: data for rel, data in files_of(dataset_dir).items()
                                           if not rel.startswith(".shardkit/")}
    assert shardkit.verify(str(tmp_path / "back"), mode="deep").ok


def test_push_of_a_shard_damaged_after_quick_checks_sends_no_manifest(s3: S3Server, bucket: str,
                                                                      tmp_path: Path) -> None:
    """A bit flip keeps size and count, so only the hash before each upload sees it; nothing may make
    the URL look like a dataset. Mutations: the manifest sent first; no hash before an upload."""
    writable_dataset = table_dataset(tmp_path, shards=4)
    shard = sorted((writable_dataset / "shards").iterdir())[-1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x10
    shard.write_bytes(bytes(data))
    with pytest.raises(shardkit.CorruptShardError, match="changed since it was verified"):
        shardkit.push(str(writable_dataset), f"s3://{bucket}/ds", storage_options=s3.options(), in_flight=1)
    assert not any(key.endswith("manifest.json") for key in s3.keys(bucket))
    assert not any(key.endswith(shard.name) for key in s3.keys(bucket))


def test_push_refuses_a_dataset_verify_faults(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    writable_dataset = table_dataset(tmp_path, shards=4)
    shard = sorted((writable_dataset / "shards").iterdir())[0]
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(shardkit.CorruptShardError, match=r"verify --quick found \d problem.*shard-00000.h5"):
        shardkit.push(str(writable_dataset), f"s3://{bucket}/ds", storage_options=s3.options())
    assert s3.keys(bucket) == {}


def test_push_replaces_another_dataset_only_when_asked(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    big, small = table_dataset(tmp_path / "a", shards=6), table_dataset(tmp_path / "b", shards=3, rows_per_shard=7)
    url = f"s3://{bucket}/ds"
    shardkit.push(str(big), url, storage_options=s3.options())
    again = shardkit.push(str(big), url, storage_options=s3.options())
    assert again.uploaded == 0
    with pytest.raises(shardkit.DestinationExistsError, match="holds another dataset"):
        shardkit.push(str(small), url, storage_options=s3.options())
    assert s3.keys(bucket)["ds/manifest.json"] == (big / "manifest.json").read_bytes()
    replaced = shardkit.push(str(small), url, storage_options=s3.options(), overwrite=True)
    assert replaced.replaced
    stored = s3.keys(bucket)
    assert stored["ds/manifest.json"] == (small / "manifest.json").read_bytes()
    assert sorted(key for key in stored if key.startswith("ds/shards/")) == \
        sorted(f"ds/shards/{path.name}" for path in (small / "shards").iterdir())


def test_pull_refuses_a_folder_holding_anything_else(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    one, other = table_dataset(tmp_path / "a", shards=2), table_dataset(tmp_path / "b", shards=3)
    shardkit.push(str(one), f"s3://{bucket}/one", storage_options=s3.options())
    shardkit.push(str(other), f"s3://{bucket}/other", storage_options=s3.options())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(shardkit.DestinationExistsError, match="holds no pull of this dataset"):
        shardkit.pull(f"s3://{bucket}/one", str(mine), storage_options=s3.options())
    assert files_of(mine) == {"notes.txt": b"keep me"}
    dst = tmp_path / "dst"
    shardkit.pull(f"s3://{bucket}/one", str(dst), storage_options=s3.options())
    with pytest.raises(shardkit.DestinationExistsError):
        shardkit.pull(f"s3://{bucket}/other", str(dst), storage_options=s3.options())
    again = shardkit.pull(f"s3://{bucket}/one", str(dst), storage_options=s3.options())
    assert (again.fetched, again.reused) == (0, 2)
    assert shardkit.verify(str(dst)).ok


def test_cli_push_and_pull_take_credentials_from_the_environment(s3: S3Server, bucket: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    source = table_dataset(tmp_path, shards=3)
    url = f"s3://{bucket}/cli"
    pushed = CliRunner().invoke(main, ["push", str(source), url, "--json"])
    assert pushed.exit_code == 0, pushed.output
    assert json.loads(pushed.output)["uploaded"] == 4
    pulled = CliRunner().invoke(main, ["pull", url, str(tmp_path / "back"), "--quiet"])
    assert pulled.exit_code == 0, pulled.output
    assert "3 shards fetched" in pulled.output
    verified = CliRunner().invoke(main, ["verify", str(tmp_path / "back"), "--quiet"])
    assert verified.exit_code == 0, verified.output
