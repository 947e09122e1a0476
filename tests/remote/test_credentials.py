"""Credentials reach the store and nothing else: not an error message, not a log record, not the
manifest, not the CLI's output, whether they come in the URL, in storage_options or the environment."""
from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.remote.location import RemoteLocation, redact_url

from .conftest import table_dataset
from .servers import FaultyFolderServer, S3Server

KEY, SECRET = "AKIDSHOWNOWHERE", "wJalrXUtnFEMI-never-printed"


def test_credentials_in_an_s3_url_reach_the_store_and_no_message(s3: S3Server, bucket: str, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    options = {"endpoint_url": s3.endpoint, "skip_instance_cache": True}
    with pytest.raises(shardkit.RemoteError) as raised:
        shardkit.pull(f"s3://{KEY}:{SECRET}@{bucket}/missing", str(tmp_path / "dst"), storage_options=options)
    assert str(raised.value) == f"s3://{bucket}/missing/manifest.json: cannot fetch: no such object"
    # botocore's own DEBUG records name the access key id (an identifier, in every signed request);
    # the secret appears in no record, and the key id in none of INFO or above
    assert not [record for record in caplog.records if SECRET in record.getMessage()]
    assert not [record for record in caplog.records if record.levelno >= logging.INFO and KEY in record.getMessage()]


def test_storage_options_secrets_stay_out_of_errors_and_the_pushed_files(s3: S3Server, bucket: str,
                                                                         tmp_path: Path) -> None:
    source = table_dataset(tmp_path, shards=2)
    options = s3.options(secret=s3.SECRET)
    with pytest.raises(shardkit.RemoteError) as raised:
        shardkit.push(str(source), "s3://no-such-bucket-here/ds", storage_options=options)
    assert s3.SECRET not in str(raised.value) and str(raised.value).startswith("s3://no-such-bucket-here/ds/")
    shardkit.push(str(source), f"s3://{bucket}/ds", storage_options=options)
    for key, data in s3.keys(bucket).items():
        assert s3.SECRET.encode() not in data and s3.KEY.encode() not in data, key


def test_http_basic_auth_in_the_url_is_sent_and_never_shown(served: FaultyFolderServer, tmp_path: Path) -> None:
    host = served.url.split("://", 1)[1]
    report = shardkit.pull(f"http://reader:{SECRET}@{host}/ds", str(tmp_path / "dst"))
    assert report.url == f"http://{host}/ds" and SECRET not in json.dumps(report.to_dict())
    assert served.authorizations == {"Basic " + base64.b64encode(f"reader:{SECRET}".encode()).decode()}
    served.fail("ds/manifest.json", "500", times=None)
    with pytest.raises(shardkit.RemoteError) as raised:
        shardkit.pull(f"http://reader:{SECRET}@{host}/ds", str(tmp_path / "other"))
    assert str(raised.value).startswith(f"http://{host}/ds/manifest.json: cannot fetch: ClientResponseError: 500")
    assert SECRET not in str(raised.value) and "reader" not in str(raised.value)


def test_cli_error_is_one_line_without_the_secret(s3: S3Server, bucket: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    for args in (["pull", f"s3://{KEY}:{SECRET}@{bucket}/missing", str(tmp_path / "dst")],
                 ["pull", f"s3://{KEY}:{SECRET}@{bucket}/missing", str(tmp_path / "dst"), "--json"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1, result.output
        assert SECRET not in result.output and KEY not in result.output
        assert f"s3://{bucket}/missing/manifest.json" in result.output
    assert result.output.count("\n") > 1    # the --json error object


def test_scrub_and_redact_remove_every_credential() -> None:
    location = RemoteLocation(f"s3://{KEY}:{SECRET}@bucket/path",
                              {"client_kwargs": {"aws_session_token": "tok-en-value"}, "endpoint_url": "http://e:1"})
    text = f"denied for {KEY} with {SECRET} and tok-en-value at http://e:1"
    assert location.scrub(text) == "denied for *** with *** and *** at http://e:1"
    assert location.shown == "s3://bucket/path"
    assert redact_url("https://u:p@host/a?X-Amz-Signature=abc&x=1") == "https://host/a?X-Amz-Signature=***&x=***"
    with pytest.raises(shardkit.UsageError, match="credentials in a gs:// URL") as raised:
        RemoteLocation(f"gs://{KEY}:{SECRET}@bucket/path")
    assert SECRET not in str(raised.value)
