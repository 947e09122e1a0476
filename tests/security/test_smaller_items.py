"""Smaller untrusted-input cases: a deeply nested manifest, and a part record claiming an
enormous part count (merge must not build a set of that size)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import ManifestError
from tests.faults.crafting import forge_manifest
from tests.faults.helpers import cli_env, run_cli
from tests.security.crafted import png_bytes


def test_deeply_nested_manifest_is_a_manifest_error(tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    (dst / "shards").mkdir(parents=True)
    (dst / "manifest.json").write_text("[" * 200000 + "]" * 200000)
    with pytest.raises(ManifestError, match="nested too deeply"):
        shardkit.open_dataset(dst)
    result = run_cli("verify", dst)
    assert result.returncode == 1 and "Traceback" not in result.stderr and "nested too deeply" in result.stderr


MERGE = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
         "from shardkit.ops.merging import merge\nfrom shardkit.errors import UsageError\n"
         "try:\n    merge([sys.argv[1]], sys.argv[2])\nexcept UsageError as exc:\n    print(exc)\n")


def test_merge_with_an_enormous_part_count_stays_small(tmp_path: Path) -> None:
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    for number in range(2):
        (src / f"{number}.png").write_bytes(png_bytes(colour=(number, 0, 0)))
    part = tmp_path / "part0"
    shardkit.convert(str(tmp_path / "src"), str(part), format="pt", samples_per_shard=1, part="0/2", quiet=True)
    forge_manifest(part, lambda data: data["part"].update(count=10 ** 12))
    result = subprocess.run([sys.executable, "-c", MERGE, str(part), str(tmp_path / "merged")], env=cli_env(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "missing part(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ..." in result.stdout
