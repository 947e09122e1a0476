"""kill -9 of a real `shardkit convert` at random moments, then `--resume`.

Each trial starts the command, SIGKILLs its parent process after a random delay (spread
over the whole run: before DST exists, while scanning, between and inside shards, around
the manifest), sometimes kills the resume too, and then resumes to the end. The result
must be byte-identical to an uninterrupted run, shards finished before the kill must not
be rewritten, and no worker may outlive its parent.
"""
from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pytest

from .helpers import make_tiny_tree, run_cli, start_cli, tree_bytes, wait_for

#: (workers, trials) per format: 10 kills per format, 20-30 across formats.
TRIALS = [(1, 6), (2, 4)]
SAMPLES_PER_SHARD = 5
EPOCH = "1700000000"


@pytest.fixture(scope="module")
def kill_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kill") / "src"
    make_tiny_tree(root, 100, seed=3)
    return root


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """(format, workers) -> the uninterrupted run's files and how long the command took."""
    return {"root": tmp_path_factory.mktemp("kill-ref")}


def _args(src: Path, dst: Path, fmt: str, workers: int) -> List[object]:
    return ["convert", src, dst, "--format", fmt, "--samples-per-shard", SAMPLES_PER_SHARD,
            "--workers", workers, "--quiet"]


def _env_epoch() -> Dict[str, str]:
    return {"SOURCE_DATE_EPOCH": EPOCH}


def _reference(references: dict, src: Path, fmt: str, workers: int) -> Tuple[Dict[str, bytes], float]:
    key = (fmt, workers)
    if key not in references:
        dst = references["root"] / f"{fmt}-{workers}"
        started = time.monotonic()
        result = run_cli(*_args(src, dst, fmt, workers), env_extra=_env_epoch())
        assert result.returncode == 0, result.stderr
        references[key] = (tree_bytes(dst), time.monotonic() - started)
    return references[key]


def session_processes(sid: int) -> List[int]:
    """Every live process of a session (the command and all its workers and helpers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _phase(dst: Path) -> str:
    if not dst.exists():
        return "before DST existed"
    if (dst / "manifest.json").exists():
        return "after the manifest" if (dst / ".shardkit").exists() else "done, while exiting"
    done = list((dst / ".shardkit" / "done").glob("*.json")) if (dst / ".shardkit" / "done").is_dir() else []
    return "no shard finished" if not done else "some shards finished"


def _finished(dst: Path) -> Dict[str, Tuple[int, int]]:
    """Shards with a done record (finished and recorded) -> (inode, mtime_ns) of their file."""
    done_dir = dst / ".shardkit" / "done"
    found = {}
    if done_dir.is_dir():
        for record in done_dir.glob("shard-*.json"):
            for shard in (dst / "shards").glob(record.stem + ".*"):
                if not shard.name.startswith("."):
                    found[shard.name] = (shard.stat().st_ino, shard.stat().st_mtime_ns)
    return found


def _kill_at(args: List[object], delay: float) -> Tuple[int, int]:
    """Start the command, SIGKILL its parent after delay; return (exit code, survivors)."""
    proc = start_cli(*args, env_extra=_env_epoch())
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    gone = wait_for(lambda: not session_processes(proc.pid), timeout=10)
    survivors = session_processes(proc.pid)
    for pid in survivors:      # clean up before failing, so nothing leaks into other tests
        os.kill(pid, signal.SIGKILL)
    return proc.returncode, 0 if gone else len(survivors)


@pytest.mark.parametrize("workers, trials", TRIALS, ids=[f"workers{w}-{n}trials" for w, n in TRIALS])
def test_kill9_then_resume_is_byte_identical(kill_tree: Path, references: dict, fmt: str, tmp_path: Path,
                                             workers: int, trials: int) -> None:
    expected, duration = _reference(references, kill_tree, fmt, workers)
    rng = np.random.default_rng([workers, trials, len(fmt)])
    phases: Counter = Counter()
    preserved = 0
    for trial in range(trials):
        dst = tmp_path / f"trial{trial}"
        args = _args(kill_tree, dst, fmt, workers)
        delay = (trial + rng.uniform()) / trials * duration * 1.1
        code, survivors = _kill_at(args, delay)
        assert survivors == 0, f"trial {trial}: {survivors} worker(s) outlived their killed parent"
        phase = "finished" if code == 0 else _phase(dst)
        phases[phase] += 1
        assert code in (0, -signal.SIGKILL)
        if trial % 2 == 1 and code != 0:
            # a second kill, during the resume itself
            _kill_at(args + ["--resume"], rng.uniform(0.2, 0.8) * duration)
        finished = _finished(dst)
        result = run_cli(*args, "--resume", env_extra=_env_epoch())
        assert result.returncode == 0, f"trial {trial} ({phase}): {result.stderr}"
        actual = tree_bytes(dst)
        assert sorted(actual) == sorted(expected), f"trial {trial} ({phase}): different files"
        for name, content in expected.items():
            assert actual[name] == content, f"trial {trial} ({phase}): {name} differs from an uninterrupted run"
        for name, identity in finished.items():
            shard = dst / "shards" / name
            assert (shard.stat().st_ino, shard.stat().st_mtime_ns) == identity, f"{name} was rewritten"
        preserved += len(finished)
    summary = ", ".join(f"{count} {phase}" for phase, count in sorted(phases.items()))
    print(f"\n{fmt} workers={workers}: {trials} kill -9 trials ({summary}); all resumed byte-identical; "
          f"{preserved} finished shards kept untouched")
    assert sum(phases.values()) == trials
    assert phases["finished"] < trials, "every run finished before its kill: the trials tested nothing"
