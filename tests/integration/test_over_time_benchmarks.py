"""benchmarks/mixing.py, duplicates.py and append.py still run, at a tiny size (nothing is timed
here: the test checks what they count)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_mixing_benchmark_counts_exact_shares(tmp_path: Path) -> None:
    out = _run("mixing.py", "--kind", "table", "--sizes", "300,200,100", "--epoch", "700", "--repeat", "1",
               "--work", str(tmp_path))
    shares = re.findall(r"^\| (\d) \| ([0-9.]+) \| ([0-9.]+) \|", out, re.M)
    assert [(source, weight, share) for source, weight, share in shares] == \
        [("0", "0.500", "0.50000"), ("1", "0.300", "0.30000"), ("2", "0.200", "0.20000")]
    assert "| source 0 alone |" in out and "| mixed |" in out


def test_duplicates_benchmark_finds_the_copies(tmp_path: Path) -> None:
    out = _run("duplicates.py", "--rows", "3000", "--features", "8", "--repeat", "1", "--workers", "1",
               "--work", str(tmp_path))
    found = {name: int(count.replace(",", "")) for name, count in
             re.findall(r"^\| ([^|]+?) \|.*\| ([0-9,]+) duplicates \|$", out, re.M)}
    assert 0 < found["duplicates"] <= 30                                  # 1% of the rows copy another
    assert found["duplicates, spilled (memory_rows=2**16)"] == found["duplicates"]
    assert found["worst case: DST and its copy"] == 3000 + found["duplicates"]


def test_append_benchmark_ends_with_the_same_samples(tmp_path: Path) -> None:
    out = _run("append.py", "--images", "60", "--repeat", "1", "--workers", "1", "--work", str(tmp_path))
    rows = re.findall(r"^\| 1 \| (full reconversion|append) \| (\d+) \|", out, re.M)
    assert rows == [("full reconversion", "66"), ("append", "66")]


def test_append_benchmark_of_tables_ends_with_the_same_rows(tmp_path: Path) -> None:
    out = _run("append.py", "--tables", "200", "--repeat", "1", "--workers", "1", "--work", str(tmp_path))
    rows = re.findall(r"^\| 1 \| (full reconversion|append) \| (\d+) \|", out, re.M)
    assert rows == [("full reconversion", "220"), ("append", "220")]


def test_append_benchmark_of_sidecars_ends_with_the_same_samples(tmp_path: Path) -> None:
    out = _run("append.py", "--sidecars", "--images", "60", "--repeat", "1", "--workers", "1", "--work", str(tmp_path))
    rows = re.findall(r"^\| 1 \| (full reconversion|append) \| (\d+) \|", out, re.M)
    assert rows == [("full reconversion", "66"), ("append", "66")]
