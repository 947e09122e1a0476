"""Memory follows the shard size, not the file size: a large CSV converts in a small peak RSS."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

_CHILD = """
import json, resource, sys
import h5py, numpy, shardkit, shardkit.writing.conversion
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = shardkit.convert(sys.argv[1], sys.argv[2], label_column="label", shard_size="1MB", quiet=True)
print(json.dumps({"before_kib": before, "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "rows": report.num_samples}))
"""


def _large_csv(path: Path, megabytes: int) -> int:
    """A numeric CSV of about `megabytes` MB: one 1 MB block of rows written again and again."""
    rng = np.random.default_rng(0)
    block = np.column_stack([rng.standard_normal((10_000, 16)), rng.integers(0, 5, 10_000)])
    lines = [",".join(f"{value:.6g}" for value in row[:-1]) + f",{int(row[-1])}\n" for row in block]
    text = "".join(lines).encode()
    repeats = max(1, megabytes * 1_000_000 // len(text))
    with open(path, "wb") as handle:
        handle.write(",".join(f"x{i}" for i in range(16)).encode() + b",label\n")
        for _ in range(repeats):
            handle.write(text)
    return repeats * len(lines)


def _large_string_csv(path: Path, megabytes: int) -> int:
    """A CSV of about `megabytes` MB with 2 numbers, 6 category columns (some values quoted) and a
    class label: the rows go through the scan's temporary files."""
    rng = np.random.default_rng(1)
    words = [f"word{i}" if i % 5 else f"\"word{i}, quoted\"" for i in range(300)]
    lines = [f"{rng.normal():.5f},{rng.normal():.5f}," + ",".join(words[k] for k in rng.integers(0, 300, 6))
             + f",class{rng.integers(0, 7)}\n" for _ in range(10_000)]
    text = "".join(lines).encode()
    repeats = max(1, megabytes * 1_000_000 // len(text))
    with open(path, "wb") as handle:
        handle.write(b"x0,x1,c0,c1,c2,c3,c4,c5,label\n")
        for _ in range(repeats):
            handle.write(text)
    return repeats * len(lines)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["numeric", "strings"])
def test_peak_rss_stays_far_below_the_file_size(tmp_path, kind):
    src = tmp_path / "large.csv"
    rows = _large_csv(src, 120) if kind == "numeric" else _large_string_csv(src, 150)
    size = src.stat().st_size
    (tmp_path / "tmp").mkdir()
    result = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(tmp_path / "dst")], check=True,
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["rows"] == rows
    growth = (facts["rss_kib"] - facts["before_kib"]) * 1024
    assert growth < size / 3, f"peak RSS grew by {growth / 1e6:.0f} MB converting a {size / 1e6:.0f} MB CSV"
    assert list((tmp_path / "tmp").iterdir()) == []
