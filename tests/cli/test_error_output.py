"""Errors built from their fields read the same on the command line: one line naming the file,
the same path in --json, the same message after crossing from a worker process."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from shardkit.cli import main
from tests.faults.helpers import make_tiny_tree


def run(*args: object) -> "CliRunner.invoke":
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_manifest_error_names_the_manifest_in_text_and_json(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tiny_tree(src, 6)
    assert run("convert", src, dst, "--quiet").exit_code == 0
    manifest = dst / "manifest.json"
    data = json.loads(manifest.read_text())
    data["manifest_version"] = 0
    manifest.write_text(json.dumps(data))
    result = run("info", dst)
    assert result.exit_code == 1
    assert result.output == f"error: {manifest}: manifest_version 0 is invalid (versions start at 1)\n"
    error = json.loads(run("info", dst, "--json").output)["error"]
    assert error == {"type": "ManifestError", "message": f"{manifest}: manifest_version 0 is invalid (versions "
                     "start at 1)", "path": str(manifest), "exit_code": 1}


def test_on_error_fail_in_a_worker_process_reads_as_in_process(tmp_path: Path) -> None:
    """The failing input is in the second shard, written by a worker process: its error is
    pickled to the parent with its fields, and prints as 'error: <file>: <problem> (--on-error fail)'."""
    src = tmp_path / "src"
    written = sorted(make_tiny_tree(src, 8), key=lambda rel: tuple(rel.split("/")))
    (src / written[5]).write_bytes(b"not an image")
    lines = []
    for workers in ("1", "2"):
        result = run("convert", src, tmp_path / f"dst{workers}", "--samples-per-shard", "4", "--workers", workers,
                     "--on-error", "fail", "--quiet", "--json")
        error = json.loads(result.output)["error"]
        assert result.exit_code == 1 and error["type"] == "ConversionError" and error["path"] == written[5]
        assert error["message"].startswith(f"{written[5]}: ") and error["message"].endswith(" (--on-error fail)")
        lines.append(error["message"])
    assert lines[0] == lines[1]
