"""Isolated children (runtime/isolation.py) are fresh interpreters with the caller's sys.path: they
never import the caller's main script (an unguarded one would run again, one importing torch
would cost each child more than a second), and still find what the caller could import."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.runtime.isolation import ChildKilled, IsolatedCalls
from tests.faults.helpers import cli_env

SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])             # a module only this process's sys.path finds
from helper_module import times_context
from shardkit.runtime.isolation import IsolatedCalls

print("main ran", flush=True)               # no __main__ guard: a spawn would run this again
with IsolatedCalls(6) as calls:
    print("result", calls.call(times_context, 7), flush=True)
"""


def test_a_child_runs_the_call_without_importing_the_callers_script(tmp_path: Path) -> None:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "helper_module.py").write_text("def times_context(context, item):\n    return context * item\n")
    script = tmp_path / "unguarded.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script), str(modules)], env=cli_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["main ran", "result 42"]


def test_a_child_that_cannot_start_is_reported_as_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """No interpreter to start (here: a missing executable) is a ChildKilled for the call, not an
    AttributeError from the half-made connection."""
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with IsolatedCalls() as calls:
        with pytest.raises(ChildKilled):
            calls.call(max, 1)
