"""docs/remote.md's blocks about converting from a bucket run, in page order, against moto's S3
server on 127.0.0.1 (credentials and endpoint from the environment, as the page says)."""
from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any, Dict

import pytest

import shardkit
from shardkit.samples import make_image_tree
from tests.integration.test_docs_snippets import page_blocks, run_blocks

from .servers import S3Server

PAGE = Path(__file__).resolve().parents[2] / "docs" / "remote.md"


def test_remote_source_blocks_run(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    import s3fs
    boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.KEY, aws_secret_access_key=s3.SECRET,
                 region_name="us-east-1").create_bucket(Bucket="my-bucket")
    tree = tmp_path / "tree"
    make_image_tree(str(tree), num_images=12, classes=("cat", "dog"), seed=2, sizes=(8, 24))
    with tarfile.open(tmp_path / "train.tar", "w") as tar:
        tar.add(tree, arcname=".")
    (tmp_path / "rows.csv").write_text("a,b,label\n" + "".join(f"{n},{n / 2},k{n % 2}\n" for n in range(30)))
    fs = s3fs.S3FileSystem(**s3.options())
    fs.put(str(tree), "my-bucket/raw/train", recursive=True)
    fs.put(str(tmp_path / "train.tar"), "my-bucket/raw/train.tar")
    fs.put(str(tmp_path / "rows.csv"), "my-bucket/raw/rows.csv")
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    blocks = [block for block in page_blocks(PAGE) if block.marker("run-by") == "tests/remote/test_remote_src_doc.py"]
    assert [block.kind for block in blocks] == ["shell"]
    scope: Dict[str, Any] = {}
    run_blocks(blocks, work, {}, scope)
    assert len(shardkit.open_dataset(work / "train-hdf5")) == 12
    assert len(shardkit.open_dataset(work / "train-from-tar")) == 12
    assert len(shardkit.open_dataset(work / "rows-hdf5")) == 30
