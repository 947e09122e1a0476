"""docs/remote.md stays true: its shell and Python blocks run, in page order, against moto's S3
server on 127.0.0.1 (credentials and endpoint from the environment, as the page says)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest

import shardkit
from tests.integration.test_docs_snippets import page_blocks, run_blocks

from .conftest import table_dataset
from .servers import S3Server

PAGE = Path(__file__).resolve().parents[2] / "docs" / "remote.md"


def test_remote_page_blocks_run(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.KEY, aws_secret_access_key=s3.SECRET,
                 region_name="us-east-1").create_bucket(Bucket="my-bucket")
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    dst = str(table_dataset(tmp_path, shards=3))
    blocks = [block for block in page_blocks(PAGE) if block.marker("run-by") == "tests/remote/test_remote_doc.py"]
    assert [block.kind for block in blocks] == ["shell", "shell", "python", "python"]
    scope: Dict[str, Any] = {}
    run_blocks(blocks, tmp_path, {"DST": dst}, scope)
    assert (tmp_path / "train" / "manifest.json").read_bytes() == (Path(dst) / "manifest.json").read_bytes()
    assert scope["label"] == shardkit.open_dataset(dst)[0][1]
    assert scope["ds"].remote_cache.usage() > 0 and (tmp_path / "cache" / "objects").is_dir()
