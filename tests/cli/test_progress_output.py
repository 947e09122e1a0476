"""Progress in a log file is a few plain lines, never a carriage-return bar; --json output is
versioned and comes without progress; the Python API is silent."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.runtime import progress


def test_convert_logs_a_few_plain_lines_when_stderr_is_a_file(image_tree: Path, tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        done = subprocess.run([sys.executable, "-m", "shardkit", "convert", str(image_tree), str(tmp_path / "dst"),
                               "--samples-per-shard", "8", "--workers", "2"], stderr=stderr, stdout=subprocess.PIPE,
                              text=True, timeout=120)
    assert done.returncode == 0
    text = log.read_text()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert 1 <= len(lines) <= 5, lines
    assert lines[-1].startswith("convert: 120 samples done in"), lines


def test_plain_lines_come_at_most_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 3600.0)
    with progress.Progress(1000, "step") as bar:
        for _ in range(1000):
            bar.advance(1, 10)
    assert log.getvalue().splitlines() == [log.getvalue().splitlines()[-1]]
    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
    log.truncate(0)
    log.seek(0)
    with progress.Progress(4, "step", unit="shard") as bar:
        bar.advance(2)
        bar.advance(2)
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("step: 2/4 shards (50%) in") and lines[-1].startswith("step: 4 shards done in")


def test_json_output_is_versioned_and_quiet(image_tree: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "shardkit", "convert", str(image_tree), str(tmp_path / "dst"),
                           "--samples-per-shard", "50", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout)["version"] == 1
    for command in (["verify", "--json"], ["info", "--json"]):
        out = subprocess.run([sys.executable, "-m", "shardkit", command[0], str(tmp_path / "dst"), *command[1:]],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stderr == ""
        assert json.loads(out.stdout)["version"] == 1


def test_python_api_is_quiet(image_tree: Path, tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    import shardkit
    shardkit.convert(str(image_tree), str(tmp_path / "dst"), samples_per_shard=50)
    assert shardkit.verify(str(tmp_path / "dst")).ok
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
