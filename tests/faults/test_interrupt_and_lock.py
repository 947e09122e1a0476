"""Ctrl-C (SIGINT) and concurrent runs, on real `shardkit convert` processes.

Ctrl-C exits with code 130 and one line saying how to resume, stops its workers at once
(even one stuck in I/O), leaves no temporary file, and `--resume` then finishes byte for
byte like an uninterrupted run. A second convert into a DST being written is refused.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import Iterator, List, Set

import pytest

from shardkit.formats import format_names

from .helpers import (EPOCH, SHARD, assert_no_traceback, convert_args, done_records, error_lines, run_cli,
                      session_processes, start_cli, tree_bytes, wait_for)

FORMATS = format_names()


@contextlib.contextmanager
def _killed_at_exit(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """The process, SIGKILLed with its process group if it is still running when the block ends."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _interrupted_lines(proc: subprocess.Popen) -> List[str]:
    """Wait for a command that was sent Ctrl-C: it exits 130 within 30 s, with no traceback;
    the non-empty lines of its stderr."""
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, f"exit {proc.returncode} after Ctrl-C; stderr: {stderr}"
    assert_no_traceback(stdout + stderr)
    return [line for line in stderr.splitlines() if line.strip()]


def _on_disk(dst: Path) -> Set[str]:
    """Shards with a file in shards/, renamed into place or still temporary (a dot and .tmp-),
    by stem: every shard the run had started writing."""
    try:
        names = os.listdir(dst / "shards")
    except OSError:
        return set()
    return {name.lstrip(".").split(".")[0] for name in names if name.lstrip(".").startswith("shard-")}


def _done(dst: Path) -> Set[str]:
    """Shards with a done record, by stem."""
    try:
        return {name.split(".")[0] for name in os.listdir(dst / ".shardkit" / "done") if name.startswith("shard-")}
    except OSError:
        return set()


def _stopped(pids: List[int]) -> bool:
    """Whether every process of pids is stopped (or gone)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] not in ("T", "t", "Z", "X"):
                    return False
        except OSError:
            continue
    return True


def _temps(dst: Path) -> List[str]:
    return [str(p) for p in dst.rglob(".*") if ".tmp" in p.name]


def _workers_of(pid: int) -> List[int]:
    """Pool workers of pid, forked or spawned (not the resource tracker)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid:
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    cmdline = handle.read()
                with open(f"/proc/{entry}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == pid and b"resource_tracker" not in cmdline:
                found.append(int(entry))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_exits_promptly_and_resume_finishes(process_tree: Path, reference: tuple, fmt: str,
                                                   tmp_path: Path, workers: int) -> None:
    """Ctrl-C in a terminal: SIGINT to the whole process group (the command and its workers)."""
    _interrupt(process_tree, reference, fmt, tmp_path, workers, "group")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS[:1])
def test_ctrl_c_does_not_wait_for_a_stuck_worker(process_tree: Path, reference: tuple, fmt: str,
                                                 tmp_path: Path) -> None:
    """A worker hangs (as on a dead network mount) and SIGINT goes to the command alone. The
    pool's stopping does not depend on the format, so one format is enough."""
    _interrupt(process_tree, reference, fmt, tmp_path, 2, "stuck-worker")


def _interrupt(process_tree: Path, reference: tuple, fmt: str, tmp_path: Path, workers: int, target: str) -> None:
    expected, _ = reference
    total = sum(1 for name in expected if name.startswith("shards/"))
    dst = tmp_path / "dst"
    args = convert_args(process_tree, dst, fmt, workers)
    with _killed_at_exit(start_cli(*args, env_extra=EPOCH)) as proc:
        assert wait_for(lambda: done_records(dst) >= 2 or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        stuck: List[int] = []
        if target == "stuck-worker":
            # one worker hangs (as on a dead network mount): Ctrl-C must not wait for it
            assert wait_for(lambda: len(_workers_of(proc.pid)) == workers, timeout=30)
            stuck = _workers_of(proc.pid)[:1]
            os.kill(stuck[0], signal.SIGSTOP)
        # The moment of the Ctrl-C, held still: every process of the run is stopped while the test
        # notes which shards it had started (a file on disk, renamed or temporary), then gets SIGINT
        # (to the whole group, as a terminal's Ctrl-C, or to the command alone) and goes on.
        os.killpg(proc.pid, signal.SIGSTOP)
        assert wait_for(lambda: _stopped(session_processes(proc.pid)), timeout=30)
        started = _on_disk(dst)
        if target == "group":
            os.killpg(proc.pid, signal.SIGINT)          # what a terminal's Ctrl-C does
        else:
            os.kill(proc.pid, signal.SIGINT)
        for pid in session_processes(proc.pid):
            if pid not in stuck:
                os.kill(pid, signal.SIGCONT)
        [line] = _interrupted_lines(proc)
    assert line.startswith("error: ") and "interrupted" in line and "run the same command with --resume" in line
    assert wait_for(lambda: not session_processes(proc.pid), timeout=10), "a worker outlived Ctrl-C"
    assert not (dst / "manifest.json").exists()
    assert _temps(dst) == [], "Ctrl-C left temporary files"
    # A shard whose file existed at the signal may still be finished: its commit can be past the
    # point of no return (commits overlap in background threads, up to 8 at once). So may the one
    # each worker was encoding, whose file an HDF5 or .pt writer makes only at its close, when the
    # Ctrl-C reached the command alone: those are the first shards, in plan order, without a file.
    # Any other shard finished means the run went on after the Ctrl-C.
    finished = _done(dst)
    in_hand = sorted(set(f"shard-{number:05d}" for number in range(total)) - started)[:workers]
    assert finished <= started | set(in_hand) and len(finished) < total, \
        f"the run went on after Ctrl-C: {sorted(finished - started)} done, not started at the signal"

    result = run_cli(*args, "--resume", env_extra=EPOCH)
    assert result.returncode == 0, result.stderr
    assert tree_bytes(dst) == expected


def test_second_convert_into_a_running_dst_is_refused(process_tree: Path, reference: tuple, fmt: str,
                                                      tmp_path: Path) -> None:
    expected, _ = reference
    dst = tmp_path / "dst"
    args = convert_args(process_tree, dst, fmt)
    first = start_cli(*args, env_extra=EPOCH)
    try:
        assert wait_for(lambda: done_records(dst) >= 1 or first.poll() is not None, timeout=60)
        os.killpg(first.pid, signal.SIGSTOP)      # hold it mid-run, lock taken
        assert first.poll() is None
        for extra in ([], ["--resume"], ["--overwrite"]):
            second = run_cli(*args, *extra, env_extra=EPOCH)
            assert second.returncode == 1, (extra, second.stderr)
            assert_no_traceback(second)
            [line] = error_lines(second)
            assert "another shardkit convert is writing here" in line and str(dst) in line
        os.killpg(first.pid, signal.SIGCONT)
        first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
    assert first.returncode == 0
    assert tree_bytes(dst) == expected, "the refused runs must not have touched the running one's output"


@pytest.mark.parametrize("fmt", FORMATS[:1])
def test_resume_with_other_options_is_refused(process_tree: Path, fmt: str, tmp_path: Path) -> None:
    """The plan's fingerprint check comes before any format code: one format is enough."""
    dst = tmp_path / "dst"
    args = convert_args(process_tree, dst, fmt)
    proc = start_cli(*args)
    assert wait_for(lambda: done_records(dst) >= 1 or proc.poll() is not None, timeout=60)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    before = tree_bytes(dst)
    result = run_cli("convert", process_tree, dst, "--format", fmt, "--samples-per-shard", SHARD + 1, "--resume", "-q")
    assert result.returncode == 2 and "differ from the interrupted run" in result.stderr
    assert_no_traceback(result)
    assert tree_bytes(dst) == before


def test_kill_while_removing_the_journal(process_tree: Path, reference: tuple, fmt: str, tmp_path: Path) -> None:
    """A kill after manifest.json was written, while .shardkit/ was being deleted, leaves a
    complete dataset plus a journal remnant without its plan: --resume tidies it and is done."""
    expected, _ = reference
    dst = tmp_path / "dst"
    for name, content in expected.items():
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (dst / name).write_bytes(content)
    (dst / ".shardkit" / "done").mkdir(parents=True)
    (dst / ".shardkit" / "lock").touch()
    result = run_cli(*convert_args(process_tree, dst, fmt), "--resume", env_extra=EPOCH)
    assert result.returncode == 0, result.stderr
    assert tree_bytes(dst) == expected and not (dst / ".shardkit").exists()


def test_ctrl_c_while_workers_parse_a_csv_tree(tmp_path: Path) -> None:
    """A tree of CSV files with string columns is parsed by the scan's worker processes, before
    DST exists: Ctrl-C stops them at once, says "interrupted", and leaves no parsed rows behind."""
    src = tmp_path / "src"
    block = "".join(f"{index * 0.5},c{index % 40},\"w{index % 7}, x\",k{index % 3}\n" for index in range(20_000))
    for number in range(4):                       # about 10 MB each: seconds of parsing on a busy machine
        path = src / f"part{number}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x,colour,word,label\n" + block * 20)
    spill_home = tmp_path / "tmp"
    spill_home.mkdir()
    dst = tmp_path / "dst"
    with _killed_at_exit(start_cli("convert", src, dst, "--label-column", "label", "--workers", 2, "--quiet",
                                   env_extra={**EPOCH, "TMPDIR": str(spill_home)})) as proc:
        assert wait_for(lambda: any(spill_home.iterdir()) or proc.poll() is not None, timeout=60)
        assert proc.poll() is None, "the scan ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        assert _interrupted_lines(proc) == ["error: interrupted"]
    assert wait_for(lambda: not session_processes(proc.pid), timeout=10), "a worker outlived Ctrl-C"
    assert list(spill_home.iterdir()) == [], "Ctrl-C left parsed rows behind"
    assert not dst.exists()
