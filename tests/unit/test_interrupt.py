"""A Ctrl-C that Python swallows (raised inside a __del__) still stops the work at check()."""
from __future__ import annotations

import gc
import os
import signal

import pytest

from shardkit.interrupt import SigintLatch


class _InterruptOnDelete:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)     # the handler raises here, where Python only prints it


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_swallowed_sigint_is_remembered() -> None:
    before = signal.getsignal(signal.SIGINT)
    with SigintLatch() as latch:
        latch.check()                           # nothing yet
        _InterruptOnDelete()
        gc.collect()
        assert latch.hit
        with pytest.raises(KeyboardInterrupt):
            latch.check()
    assert signal.getsignal(signal.SIGINT) is before


def test_plain_sigint_raises_at_once() -> None:
    with SigintLatch() as latch:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10**6):
                pass
        assert latch.hit
