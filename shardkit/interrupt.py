"""A Ctrl-C latch: SIGINT is remembered as well as raised, so one that Python swallows (it can
land inside a weakref callback or a __del__, where exceptions are only printed) still stops
the conversion at the next safe point instead of letting it finish as if nothing happened."""
from __future__ import annotations

import signal
import sys
from typing import Any, Optional


class SigintLatch:
    """Within the block, SIGINT sets `hit` and raises KeyboardInterrupt; check() re-raises it."""

    def __init__(self) -> None:
        self.hit = False
        self._previous: Optional[Any] = None
        self._previous_hook: Optional[Any] = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.hit = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if a SIGINT arrived (even one an earlier raise lost)."""
        if self.hit:
            raise KeyboardInterrupt

    def _unraisable(self, unraisable: Any) -> None:
        """Python would print a swallowed KeyboardInterrupt as a traceback; the latch has it."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and self.hit:
            return
        self._previous_hook(unraisable)

    def __enter__(self) -> "SigintLatch":
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:      # not the main thread: signals are not ours to change
            self._previous = None
            return self
        self._previous_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            sys.unraisablehook = self._previous_hook
