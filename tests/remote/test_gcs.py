"""gs:// URLs against a Cloud Storage emulator on 127.0.0.1 (the JSON API gcsfs speaks): push and
pull, cached reads and convert from a bucket work there as they do against S3, byte for byte."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

import shardkit
from shardkit.samples import make_image_tree

from .conftest import files_of
from .servers import GCSServer


@pytest.fixture(scope="module")
def gcs() -> Iterator[GCSServer]:
    server = GCSServer()
    yield server
    server.stop()


def test_push_then_pull_through_gs_is_byte_identical_and_reads_through_the_cache(
        gcs: GCSServer, table50: Path, tmp_path: Path) -> None:
    url = f"gs://{gcs.new_bucket()}/datasets/table"
    pushed = shardkit.push(str(table50), url, storage_options=gcs.options())
    manifest = json.loads((table50 / "manifest.json").read_text())
    assert pushed.uploaded == len(manifest["shards"]) + 1
    pulled = shardkit.pull(url, str(tmp_path / "back"), storage_options=gcs.options())
    assert (pulled.fetched, pulled.reused) == (len(manifest["shards"]), 0)
    assert files_of(tmp_path / "back") == {rel: data for rel, data in files_of(table50).items()
                                           if not rel.startswith(".shardkit/")}
    local = shardkit.open_dataset(str(table50))
    with shardkit.open_dataset(url, cache_dir=tmp_path / "cache", cache_limit="1MB",
                               storage_options=gcs.options()) as remote:
        order = list(range(0, len(local), 7))
        assert [remote[i][0].tolist() for i in order] == [local[i][0].tolist() for i in order]
        assert [remote.key(i) for i in order] == [local.key(i) for i in order]


def test_a_tree_and_a_tar_in_a_gs_bucket_convert_to_the_shards_of_the_same_on_disk(
        gcs: GCSServer, tmp_path: Path) -> None:
    """The tree's local files get the objects' times first (they are part of what a tree's order
    is drawn from); the tar's members keep the times the tar records, wherever it lies."""
    import tarfile
    tree = tmp_path / "tree"
    make_image_tree(str(tree), num_images=10, classes=("cat", "dog"), seed=4, sizes=(8, 24))
    with tarfile.open(tmp_path / "train.tar", "w") as tar:
        tar.add(tree, arcname=".")
    bucket, fs = gcs.new_bucket(), gcs.filesystem()
    fs.put(str(tree), f"{bucket}/train", recursive=True)
    fs.put(str(tmp_path / "train.tar"), f"{bucket}/train.tar")
    for path, info in fs.find(f"{bucket}/train", detail=True).items():
        stamp = int(info["mtime"].timestamp())          # shardkit keeps an object's whole seconds
        os.utime(tree / path[len(f"{bucket}/train/"):], (stamp, stamp))
    options = dict(samples_per_shard=4, workers=1, quiet=True, seed=3)
    for local, remote in ((tree, f"gs://{bucket}/train"), (tmp_path / "train.tar", f"gs://{bucket}/train.tar")):
        shardkit.convert(str(local), str(tmp_path / "local"), overwrite=True, **options)
        report = shardkit.convert(remote, str(tmp_path / "gs"), storage_options=gcs.options(), overwrite=True,
                                  **options)
        assert report.num_samples == 10
        assert files_of(tmp_path / "gs" / "shards") == files_of(tmp_path / "local" / "shards"), remote


def test_an_objects_time_is_one_whatever_form_the_store_gives_it_in() -> None:
    """GCS gives `updated` as text, gcsfs adds `mtime` as a date, S3 gives `LastModified` as a date:
    each is cut to its whole second. Mutation: a date rounded to the nearest second."""
    import datetime

    from shardkit.sources.member_trees import modified_ns
    text = "2026-12-04T16:15:16.788329Z"
    date = datetime.datetime(2026, 12, 4, 16, 15, 16, 788329, tzinfo=datetime.timezone.utc)
    whole = int(datetime.datetime(2026, 12, 4, 16, 15, 16, tzinfo=datetime.timezone.utc).timestamp()) * 10 ** 9
    assert modified_ns({"updated": text}) == modified_ns({"mtime": date}) == modified_ns({"LastModified": date}) \
        == whole
