"""Out of space during convert, for real: RLIMIT_FSIZE on the `shardkit` process (the kernel
refuses writes past the limit with EFBIG) and a small tmpfs that fills up (ENOSPC).

The run must fail with one line naming what could not be written, leave no manifest and no
temporary file, and `--resume` must finish once space returns, byte for byte like an
uninterrupted run, without rewriting the shards that were finished.
"""
from __future__ import annotations

import io
import resource
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from shardkit.formats import format_names, get_format

from .helpers import assert_no_traceback, error_lines, make_tiny_tree, run_cli, tree_bytes

EPOCH = {"SOURCE_DATE_EPOCH": "1700000000"}


def _noise_png(side: int, seed: int) -> bytes:
    from PIL import Image
    pixels = np.random.default_rng(seed).integers(0, 256, size=(side, side, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def tiny_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("full") / "tiny"
    make_tiny_tree(root, 100, seed=9)
    return root


@pytest.fixture(scope="module")
def tree_with_a_big_image(tmp_path_factory: pytest.TempPathFactory, tiny_tree: Path) -> Path:
    """The tiny tree and, in the middle of the order, one image of about 100 KB (its shard is big)."""
    root = tmp_path_factory.mktemp("full") / "big"
    shutil.copytree(tiny_tree, root)
    (root / "class1" / "00030-big.png").write_bytes(_noise_png(180, 1))
    return root


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _args(src: Path, dst: Path, fmt: str, workers: int, per_shard: int) -> List[object]:
    return ["convert", src, dst, "--format", fmt, "--samples-per-shard", per_shard, "--workers", workers, "-q"]


def _shard_identities(dst: Path) -> Dict[str, tuple]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (dst / "shards").glob("shard-*")}


def _reference(src: Path, dst: Path, fmt: str, per_shard: int) -> Dict[str, bytes]:
    result = run_cli(*_args(src, dst, fmt, 1, per_shard), env_extra=EPOCH)
    assert result.returncode == 0, result.stderr
    return tree_bytes(dst)


def _check_failed_cleanly(result: subprocess.CompletedProcess, dst: Path, words: str) -> str:
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    [line] = error_lines(result)
    assert "cannot write" in line and words in line and "--resume" in line, line
    assert not (dst / "manifest.json").exists()
    assert [p.name for p in dst.rglob(".*") if ".tmp" in p.name] == []
    return line


@pytest.mark.slow
@pytest.mark.parametrize("fmt, workers", [(name, 1) for name in format_names()] + [(format_names()[0], 2)])
def test_file_size_limit_during_a_shard(tree_with_a_big_image: Path, fmt: str, tmp_path: Path, workers: int) -> None:
    """Every format in one process; with workers (stopping the others when one fails, removing
    their temporary files: no format code involved) for one format."""
    expected = _reference(tree_with_a_big_image, tmp_path / "ref", fmt, 6)
    sizes = {name: len(data) for name, data in expected.items() if name.startswith("shards/")}
    big = max(sizes, key=sizes.get)
    limit = (sorted(sizes.values())[-2] + sizes[big]) // 2     # every shard fits but the big one
    dst = tmp_path / "dst"
    result = run_cli(*_args(tree_with_a_big_image, dst, fmt, workers, 6), preexec_fn=_limit_file_size(limit),
                     env_extra=EPOCH)
    line = _check_failed_cleanly(result, dst, "File too large")
    assert f"shards/{Path(big).name}" in line and "raise the file size limit" in line
    kept = _shard_identities(dst)
    assert kept and f"{Path(big).name}" not in kept

    result = run_cli(*_args(tree_with_a_big_image, dst, fmt, workers, 6), "--resume", env_extra=EPOCH)
    assert result.returncode == 0, result.stderr
    assert tree_bytes(dst) == expected
    if workers == 1:   # in one process the shards before the big one were finished, and stay untouched
        assert all(_shard_identities(dst)[name] == identity for name, identity in kept.items())


def test_file_size_limit_on_the_manifest(tiny_tree: Path, fmt: str, tmp_path: Path) -> None:
    """Every shard fits, the manifest (one entry per shard, 100 shards) does not."""
    expected = _reference(tiny_tree, tmp_path / "ref", fmt, 1)
    limit = len(expected["manifest.json"]) - 100
    assert max(len(data) for name, data in expected.items() if name != "manifest.json") < limit
    dst = tmp_path / "dst"
    result = run_cli(*_args(tiny_tree, dst, fmt, 1, 1), preexec_fn=_limit_file_size(limit), env_extra=EPOCH)
    line = _check_failed_cleanly(result, dst, "File too large")
    assert f"{dst / 'manifest.json'}: cannot write" in line
    kept = _shard_identities(dst)
    assert len(kept) == sum(1 for name in expected if name.startswith("shards/"))
    result = run_cli(*_args(tiny_tree, dst, fmt, 1, 1), "--resume", env_extra=EPOCH)
    assert result.returncode == 0, result.stderr
    assert tree_bytes(dst) == expected
    assert _shard_identities(dst) == kept, "--resume rewrote shards that were finished"


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A real file system that fills up: a 192 KiB tmpfs (needs mount rights; skipped otherwise)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip() or 'not permitted'}); "
                    "the RLIMIT_FSIZE tests cover the same failures as EFBIG")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.slow
def test_full_tmpfs_then_resume_after_space_returns(tree_with_a_big_image: Path, fmt: str, tmp_path: Path,
                                                    small_tmpfs: Path) -> None:
    expected = _reference(tree_with_a_big_image, tmp_path / "ref", fmt, 3)
    assert sum(len(d) for d in expected.values()) > 192 * 1024, "the dataset must not fit in the tmpfs"
    dst = small_tmpfs / "dst"
    args = _args(tree_with_a_big_image, dst, fmt, 1, 3)
    result = run_cli(*args, env_extra=EPOCH)
    line = _check_failed_cleanly(result, dst, "No space left on device")
    assert "free some space" in line
    kept = _shard_identities(dst)
    recorded = {path.stem + get_format(fmt).extension for path in (dst / ".shardkit" / "done").glob("shard-*.json")}
    # space returns: the same file system, grown
    grown = subprocess.run(["mount", "-o", "remount,size=16m", str(small_tmpfs)], capture_output=True)
    assert grown.returncode == 0, grown.stderr
    result = run_cli(*args, "--resume", env_extra=EPOCH)
    assert result.returncode == 0, result.stderr
    assert tree_bytes(dst) == expected
    # a shard whose done record could not be written is redone (commits overlap, so several may be
    # in flight when the disk fills); every shard with a done record is kept as it was
    assert recorded, "some shard finished before the disk filled"
    rewritten = [name for name in recorded if _shard_identities(dst)[name] != kept[name]]
    assert not rewritten, rewritten


def _spilling_table(tmp_path: Path) -> Path:
    """A CSV table with string columns (so the scan spills its parsed rows to TMPDIR)."""
    src = tmp_path / "rows.csv"
    rng = np.random.default_rng(2)
    rows = [f"{rng.normal():.5f},c{rng.integers(0, 9)},k{rng.integers(0, 3)}\n" for _ in range(30_000)]
    src.write_text("x,colour,label\n" + "".join(rows))
    return src


def test_file_size_limit_while_a_csv_scan_spills_rows(tmp_path: Path) -> None:
    """The spill under RLIMIT_FSIZE (no privileges needed): one line naming the spill, nothing
    left in TMPDIR, DST never created."""
    src = _spilling_table(tmp_path)
    spill_dir = tmp_path / "tmp"
    spill_dir.mkdir()
    dst = tmp_path / "dst"
    result = run_cli("convert", src, dst, "--label-column", "label", "-q", preexec_fn=_limit_file_size(64 * 1024),
                     env_extra={**EPOCH, "TMPDIR": str(spill_dir)})
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    [line] = error_lines(result)
    assert f"{spill_dir}/shardkit-csv-" in line and "cannot write the parsed CSV rows" in line, line
    assert "File too large" in line, line
    assert not dst.exists() and list(spill_dir.iterdir()) == []


def test_full_tmpdir_while_a_csv_scan_spills_rows(tmp_path: Path, small_tmpfs: Path) -> None:
    """A CSV table with string columns spills its parsed rows to TMPDIR during the scan: a full
    TMPDIR stops the run with one line saying what to do, before DST exists, leaving nothing there."""
    src = tmp_path / "rows.csv"
    rng = np.random.default_rng(2)
    rows = [f"{rng.normal():.5f},c{rng.integers(0, 9)},k{rng.integers(0, 3)}\n" for _ in range(30_000)]
    src.write_text("x,colour,label\n" + "".join(rows))
    dst = tmp_path / "dst"
    args = ["convert", src, dst, "--label-column", "label", "-q"]
    result = run_cli(*args, env_extra={**EPOCH, "TMPDIR": str(small_tmpfs)})
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    [line] = error_lines(result)
    assert f"{small_tmpfs}/shardkit-csv-" in line and "cannot write the parsed CSV rows" in line, line
    assert "No space left on device" in line and "TMPDIR" in line, line
    assert not dst.exists() and list(small_tmpfs.iterdir()) == []
    result = run_cli(*args, env_extra={**EPOCH, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "wrote 30000 samples" in result.stdout + result.stderr
