"""verify detects damage, not tampering: a resealed forgery passes the plain checks, and only
--expect-manifest-sha256 (a value from a trusted channel) tells it apart."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import UsageError
from tests.faults.crafting import forge_manifest
from tests.faults.helpers import run_cli
from tests.security.crafted import one_image_dataset


def trusted_hash(dst: Path) -> str:
    return json.loads((dst / "manifest.json").read_text())["manifest_sha256"]


def test_a_resealed_forgery_fails_only_against_the_trusted_hash(tmp_path: Path) -> None:
    dst = one_image_dataset(tmp_path, "pt")
    trusted = trusted_hash(dst)
    assert shardkit.verify(str(dst), mode="deep", expect_manifest_sha256=trusted).ok
    forge_manifest(dst, lambda data: data.update(classes=["forged"]))      # a consistent, resealed edit
    assert shardkit.verify(str(dst), mode="deep").ok                        # damage checks cannot see it
    report = shardkit.verify(str(dst), mode="deep", expect_manifest_sha256=trusted.upper())
    assert [problem.kind for problem in report.problems] == ["manifest"]
    assert "not the dataset you trust" in report.problems[0].message
    cli = run_cli("verify", dst, "--quick", "--expect-manifest-sha256", trusted)
    assert cli.returncode == 1 and "not the dataset you trust" in cli.stderr
    assert run_cli("verify", dst, "--quick", "--expect-manifest-sha256", trusted_hash(dst)).returncode == 0


def test_a_malformed_expected_hash_is_a_usage_error(tmp_path: Path) -> None:
    dst = one_image_dataset(tmp_path, "pt")
    with pytest.raises(UsageError, match="64 hex digits"):
        shardkit.verify(str(dst), expect_manifest_sha256="abc")
    cli = run_cli("verify", dst, "--expect-manifest-sha256", "xyz")
    assert cli.returncode == 2 and cli.stderr.count("\n") == 1 and "64 hex digits" in cli.stderr
