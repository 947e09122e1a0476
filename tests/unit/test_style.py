"""flake8 passes on the package, tests and benchmarks (configuration in setup.cfg)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_flake8_clean() -> None:
    pytest.importorskip("flake8")
    targets = [name for name in ("shardkit", "tests", "benchmarks") if (REPO / name).exists()]
    done = subprocess.run([sys.executable, "-m", "flake8", *targets], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
