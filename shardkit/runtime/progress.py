"""One progress report for every long step: a tqdm.auto bar on a terminal or in a notebook, and an
occasional plain line in a log file (no carriage-return redraws that grow a Slurm or CI log by MBs)."""
from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

#: Seconds between two plain lines when stderr is not a terminal.
LOG_INTERVAL_S = 30.0


class Progress:
    """Counts items and bytes of one step and shows them: silent with quiet=True, a live bar where
    stderr is a terminal or a notebook, else a plain line every LOG_INTERVAL_S and one at the end."""

    def __init__(self, total: Optional[int], desc: str, quiet: bool = False, unit: str = "sample") -> None:
        self._bar: Any = None
        self._log: Optional[TextIO] = None
        self._total, self._desc, self._unit = total, desc, unit
        self._items = 0
        self._bytes = 0
        self._started = time.monotonic()
        self._last_postfix = 0.0
        self._last_line = self._started
        if quiet:
            return
        from tqdm.auto import tqdm
        if _interactive(tqdm):
            self._bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, leave=True, mininterval=0.25)
        else:
            self._log = sys.stderr

    def advance(self, items: int, nbytes: int = 0) -> None:
        """Count items and bytes just done."""
        self.set(self._items + items, self._bytes + nbytes)

    def set(self, items: int, nbytes: int) -> None:
        """Set the running totals (used when workers count in shared memory)."""
        delta = items - self._items
        self._items, self._bytes = items, nbytes
        now = time.monotonic()
        if self._log is not None and now - self._last_line >= LOG_INTERVAL_S:
            self._last_line = now
            self._write_line(now, done=False)
        if self._bar is None:
            return
        if delta:
            self._bar.update(delta)
        if now - self._last_postfix >= 0.5:
            self._last_postfix = now
            self._bar.set_postfix_str(self._rate(now), refresh=False)

    def _rate(self, now: float) -> str:
        return f"{self._bytes / 1e6 / max(now - self._started, 1e-9):.1f} MB/s"

    def _write_line(self, now: float, done: bool) -> None:
        assert self._log is not None
        elapsed = max(now - self._started, 1e-9)
        share = f" ({100 * self._items / self._total:.0f}%)" if self._total and not done else ""
        count = f"{self._items}/{self._total}" if self._total and not done else f"{self._items}"
        self._log.write(f"{self._desc}: {count} {self._unit}s{share}{' done' if done else ''} in {elapsed:.0f}s, "
                        f"{self._items / elapsed:.1f} {self._unit}s/s, {self._rate(now)}\n")
        self._log.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._log is not None:
            self._write_line(time.monotonic(), done=exc[0] is None)
        if self._bar is not None:
            self._bar.set_postfix_str(self._rate(time.monotonic()), refresh=False)
            self._bar.close()


def _interactive(tqdm_class: type) -> bool:
    """True where a redrawn bar is wanted: a notebook (tqdm.auto picked its widget) or a terminal."""
    from tqdm.asyncio import tqdm as console_tqdm
    if tqdm_class is not console_tqdm:
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())
