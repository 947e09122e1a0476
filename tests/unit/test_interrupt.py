"""A Ctrl-C that Python swallows (raised inside a __del__) still stops the work at check(), and
the user sees no "Exception ignored" traceback for it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.runtime.interrupt import SigintLatch

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import gc, os, signal, sys
from shardkit.runtime.interrupt import SigintLatch

class InterruptOnDelete:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)     # the handler raises here, where Python only prints it

before = signal.getsignal(signal.SIGINT)
with SigintLatch() as latch:
    latch.check()
    InterruptOnDelete()
    gc.collect()
    assert latch.hit
    try:
        latch.check()
    except KeyboardInterrupt:
        print("stopped at check")
assert signal.getsignal(signal.SIGINT) is before
"""


def test_swallowed_sigint_is_remembered_and_silent() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped at check"
    assert done.stderr == ""


def test_plain_sigint_raises_at_once() -> None:
    with SigintLatch() as latch:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):
                pass
        assert latch.hit


def test_deferred_sigint_waits_for_check() -> None:
    """Inside deferred() a SIGINT only sets the latch (a process pool's waits take several locks
    in a row); check() raises it, and outside deferred() it raises at once again."""
    with SigintLatch() as latch:
        with latch.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):          # signal handlers run between bytecodes: plenty of chances
                pass
            assert latch.hit
            with pytest.raises(KeyboardInterrupt):
                latch.check()
        latch.hit = False
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):
                pass
