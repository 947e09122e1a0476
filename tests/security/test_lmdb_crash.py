"""A crafted LMDB shard kills the process that reads it (SIGBUS); verify checks LMDB shards in
child processes, so it reports the shard (exit 1, one line) instead of dying with it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import shardkit
from shardkit.runtime.isolation import ChildFailed, ChildKilled, IsolatedCalls
from tests.faults.helpers import cli_env, run_cli
from tests.security.crafted import overlong_lmdb_record

KILLED = ("killed by SIGBUS", "killed by SIGSEGV")


def test_the_crafted_shard_really_kills_a_reader(tmp_path: Path) -> None:
    """The threat is real: reading the sample in-process ends in a signal, not an exception."""
    dst = overlong_lmdb_record(tmp_path)
    code = "import sys, shardkit\nshardkit.open_dataset(sys.argv[1], decode=None)[0]\n"
    result = subprocess.run([sys.executable, "-c", code, str(dst)], env=cli_env(), capture_output=True, timeout=120)
    assert result.returncode in (-signal.SIGBUS, -signal.SIGSEGV), result


@pytest.mark.parametrize("mode", [(), ("--deep",)])
def test_verify_reports_a_shard_that_kills_its_checker(tmp_path: Path, mode: tuple) -> None:
    """verify and verify --deep open a reader (the record's node kills it); --quick reads only the
    metadata record, as for every format: presence, sizes, counts."""
    dst = overlong_lmdb_record(tmp_path)
    result = run_cli("verify", dst, *mode)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "shard-00000.lmdb" in line]
    assert len(lines) == 1 and any(word in lines[0] for word in KILLED), result.stderr


@pytest.mark.parametrize("workers", [1, 2])
def test_the_other_shards_are_still_checked(tmp_path: Path, workers: int) -> None:
    """Three shards, the first crafted: its checker dies, is replaced, and the two intact shards
    are checked sample by sample."""
    dst = overlong_lmdb_record(tmp_path, images=3)
    report = shardkit.verify(str(dst), mode="deep", workers=workers)
    assert [(problem.kind, problem.shard) for problem in report.problems] == [("structure", "shards/shard-00000.lmdb")]
    assert any(word in report.problems[0].message for word in KILLED)
    assert (report.shards_checked, report.samples_checked) == (3, 2)


def _signal_self(context: None, number: int) -> int:
    os.kill(os.getpid(), number)
    return number


def test_a_child_killed_by_a_real_signal_is_reported_and_replaced() -> None:
    with IsolatedCalls() as calls:
        with pytest.raises(ChildKilled, match="killed by SIGBUS") as caught:
            calls.call(_signal_self, signal.SIGBUS)
        assert caught.value.exitcode == -signal.SIGBUS
        assert calls.call(_add, 3) == 4                     # a fresh child
        with pytest.raises(ChildFailed, match="ZeroDivisionError: division by zero"):
            calls.call(_divide_by_zero, 1)                  # ordinary exceptions come back by name
        assert calls.call(_add, 4) == 5


def test_the_context_reaches_every_child() -> None:
    with IsolatedCalls(context=10) as calls:
        assert calls.call(_add, 1) == 11
        with pytest.raises(ChildKilled):
            calls.call(_signal_self, signal.SIGSEGV)
        assert calls.call(_add, 2) == 12                    # the new child got it too


def _add(context: object, value: int) -> int:
    return value + (context if isinstance(context, int) else 1)


def _divide_by_zero(context: object, value: int) -> float:
    return value / 0
