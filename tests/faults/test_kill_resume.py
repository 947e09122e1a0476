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
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest

from .helpers import (EPOCH, convert_args, done_records, run_cli, session_processes, start_cli, timed_run,
                      tree_bytes, wait_for)

#: kill -9 trials of real processes: slow (-m "not slow" leaves them out; the README's command and CI run them)
pytestmark = pytest.mark.slow

#: (workers, trials) per format: 7 kills per format, 21 over the three formats.
TRIALS = [(1, 5), (2, 2)]


def _phase(dst: Path) -> str:
    if not dst.exists():
        return "before DST existed"
    if (dst / "manifest.json").exists():
        return "after the manifest" if (dst / ".shardkit").exists() else "done, while exiting"
    return "some shards finished" if done_records(dst) else "no shard finished"


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


def _kill_at(args: List[object], delay: float = 0.0, when: Optional[Callable[[], bool]] = None,
             env: Dict[str, str] = EPOCH) -> Tuple[int, int]:
    """Start the command and SIGKILL its parent: once `when()` holds (polled every millisecond),
    then after `delay` seconds. Returns (exit code, workers that outlived it)."""
    proc = start_cli(*args, env_extra=env)
    if when is not None:
        while proc.poll() is None and not when():
            time.sleep(0.001)
    time.sleep(delay)
    if proc.poll() is None:          # not yet reaped: a process that just ended is a zombie, still killable
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    gone = wait_for(lambda: not session_processes(proc.pid), timeout=10)
    survivors = session_processes(proc.pid)
    for pid in survivors:      # clean up before failing, so nothing leaks into other tests
        os.kill(pid, signal.SIGKILL)
    return proc.returncode, 0 if gone else len(survivors)


@pytest.mark.parametrize("workers, trials", TRIALS, ids=[f"workers{w}-{n}trials" for w, n in TRIALS])
def test_kill9_then_resume_is_byte_identical(process_tree: Path, reference: tuple, fmt: str, tmp_path: Path,
                                             workers: int, trials: int) -> None:
    expected, timeline = reference
    if workers > 1:
        # an uninterrupted run with workers: the same bytes, and its own timeline
        timeline = timed_run(convert_args(process_tree, tmp_path / "whole", fmt, workers), tmp_path / "whole")
        assert tree_bytes(tmp_path / "whole") == expected
    _trials(lambda dst: convert_args(process_tree, dst, fmt, workers), expected, timeline, trials, tmp_path,
            np.random.default_rng([workers, trials, len(fmt)]), f"{fmt} image tree, workers={workers}")


@pytest.fixture(scope="module")
def csv_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CSV file of 20,000 rows (numbers, a category, a class label): a source that is streamed."""
    path = tmp_path_factory.mktemp("kill-csv") / "rows.csv"
    rng = np.random.default_rng(4)
    lines = ["x,count,colour,label"] + [f"{rng.normal():.5f},{rng.integers(0, 100)},{'rgb'[i % 3]},"
                                        f"{'cat' if rng.uniform() < 0.5 else 'dog'}" for i in range(20000)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_kill9_csv_source_then_resume(csv_source: Path, fmt: str, tmp_path: Path) -> None:
    """The same for a CSV source (3 trials per format), whose rows the scan parses into temporary
    files: a killed run leaves them behind, and the resume removes them."""
    def args(dst: Path) -> List[object]:
        return ["convert", csv_source, dst, "--format", fmt, "--label-column", "label",
                "--samples-per-shard", 1000, "--quiet"]
    spill_home = tmp_path / "tmp"
    spill_home.mkdir()
    reference = tmp_path / "reference"
    timeline = timed_run(args(reference), reference)
    _trials(args, tree_bytes(reference), timeline, 3, tmp_path, np.random.default_rng(len(fmt)), f"{fmt} CSV",
            env={**EPOCH, "TMPDIR": str(spill_home)})
    assert list(spill_home.iterdir()) == [], "temporary files of the killed runs were left behind"


def _trials(args_for: Callable[[Path], List[object]], expected: Dict[str, bytes], timeline: Tuple[float, float],
            trials: int, tmp_path: Path, rng: np.random.Generator, what: str, env: Dict[str, str] = EPOCH) -> None:
    """Trial 0 is killed at a random moment before its plan is recorded (timed from an
    uninterrupted run); trial k >= 1 once its n-th shard is recorded, n spread from 0 to all
    shards, plus up to 30 ms, so the kills land inside shards, between them and around the
    manifest whatever the machine's speed."""
    planned, _ = timeline
    shards = sum(1 for name in expected if name.startswith("shards/"))
    phases: Counter = Counter()
    preserved = 0
    for trial in range(trials):
        dst = tmp_path / f"trial{trial}"
        args = args_for(dst)
        if trial == 0:
            code, survivors = _kill_at(args, rng.uniform(0, planned), env=env)
        else:
            target = int((trial - 1 + rng.uniform()) / (trials - 1) * (shards + 1))
            code, survivors = _kill_at(args, rng.uniform(0, 0.03), when=lambda: done_records(dst) >= target
                                       if target else (dst / ".shardkit" / "plan.json").exists(), env=env)
        assert survivors == 0, f"trial {trial}: {survivors} worker(s) outlived their killed parent"
        phase = "finished" if code == 0 else _phase(dst)
        phases[phase] += 1
        assert code in (0, -signal.SIGKILL)
        if trial % 2 == 1 and code != 0:
            # a second kill, during the resume itself, once it has recorded one more shard
            before = done_records(dst)
            _kill_at(args + ["--resume"], rng.uniform(0, 0.03), when=lambda: done_records(dst) > before, env=env)
        finished = _finished(dst)
        result = run_cli(*args, "--resume", env_extra=env)
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
    print(f"\n{what}: {trials} kill -9 trials ({summary}); all resumed byte-identical; "
          f"{preserved} finished shards kept untouched")
    assert phases["finished"] < trials, "every run finished before its kill: the trials tested nothing"
