"""A Ctrl-C latch: SIGINT is remembered as well as raised, so one that Python swallows (it can
land inside a weakref callback or a __del__, where exceptions are only printed) still stops
the conversion at the next safe point instead of letting it finish as if nothing happened.
Where a raise at an arbitrary point would do harm — a process pool's bookkeeping takes several
locks in a row, and a KeyboardInterrupt between two of them leaves one taken for good, so the
interpreter later hangs at exit — the latch only records SIGINT (deferred()) and the code
raises it at its next check()."""
from __future__ import annotations

import contextlib
import signal
import sys
from typing import Any, Iterator, Optional


class SigintLatch:
    """Within the block, SIGINT sets `hit` and raises KeyboardInterrupt (only sets it inside
    deferred()); check() raises it."""

    def __init__(self) -> None:
        self.hit = False
        self._deferring = False
        self._previous: Optional[Any] = None
        self._previous_hook: Optional[Any] = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.hit = True
        if not self._deferring:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Within, SIGINT only sets `hit`; the block calls check() at points where stopping is safe."""
        previous, self._deferring = self._deferring, True
        try:
            yield
        finally:
            self._deferring = previous

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
