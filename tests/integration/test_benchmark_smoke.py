"""The many-shard benchmarks that reach into the read path's parts still run, at a tiny size (they
time nothing here: the test checks that every part they name exists and reads)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb", "pt"])
def test_read_parts_runs_every_part(tmp_path: Path, fmt: str) -> None:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "read_parts.py"), "--format", fmt,
                           "--rows", "2000", "--few", "2", "--many", "20", "--reads", "300", "--repeats", "1",
                           "--work", str(tmp_path)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'benchmarks'}"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1].strip() for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    expected = {"ds[i]", "locate", "locate+row", "locate+reader", "reader.read", "label item", "global label"}
    assert expected <= set(rows), done.stdout
