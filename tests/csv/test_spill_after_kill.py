"""A conversion killed (SIGKILL) while its scan writes the parsed rows leaves them in TMPDIR; the
next conversion that uses the same TMPDIR removes them, and only them."""
from __future__ import annotations

import os
import signal
from pathlib import Path

from shardkit.sources.tabular.spill import PREFIX, spill_prefix
from tests.faults.helpers import EPOCH, run_cli, start_cli, wait_for


def _spills(home: Path) -> list:
    return sorted(path.name for path in home.iterdir() if path.name.startswith(PREFIX))


def test_kill9_during_the_scan_then_the_next_conversion_removes_the_spill(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    block = "".join(f"{index * 0.5},c{index % 40},k{index % 3}\n" for index in range(20_000))
    big.write_text("x,colour,label\n" + block * 40)          # about 10 MB: seconds of scanning
    home = tmp_path / "tmp"
    home.mkdir()
    (home / "unrelated").mkdir()
    env = {**EPOCH, "TMPDIR": str(home)}
    proc = start_cli("convert", big, tmp_path / "dst", "--label-column", "label", "--workers", 1, "--quiet",
                     env_extra=env)
    try:
        rows = lambda: [home / name / "rows.bin" for name in _spills(home)]  # noqa: E731
        assert wait_for(lambda: any(path.exists() and path.stat().st_size > 0 for path in rows())
                        or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, "the scan ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    left = _spills(home)
    assert len(left) == 1 and left[0].startswith(spill_prefix(proc.pid)), left
    small = tmp_path / "small.csv"
    small.write_text("x,label\n1,0\n2,1\n")
    done = run_cli("convert", small, tmp_path / "dst2", "--label-column", "label", "--quiet", env_extra=env)
    assert done.returncode == 0, done.stderr
    assert _spills(home) == [] and (home / "unrelated").is_dir()
