"""One progress bar for every long step: samples/s from tqdm, MB/s as a postfix."""
from __future__ import annotations

import time
from typing import Any


class Progress:
    """A tqdm bar on stderr (silent with quiet=True) that also reports MB/s."""

    def __init__(self, total: int, desc: str, quiet: bool = False, unit: str = "sample") -> None:
        self._bar: Any = None
        self._items = 0
        self._bytes = 0
        self._started = time.monotonic()
        self._last_postfix = 0.0
        if not quiet:
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True,
                             leave=True, mininterval=0.25)

    def advance(self, items: int, nbytes: int = 0) -> None:
        """Count items and bytes just done."""
        self.set(self._items + items, self._bytes + nbytes)

    def set(self, items: int, nbytes: int) -> None:
        """Set the running totals (used when workers count in shared memory)."""
        delta = items - self._items
        self._items, self._bytes = items, nbytes
        if self._bar is None:
            return
        if delta:
            self._bar.update(delta)
        now = time.monotonic()
        if now - self._last_postfix >= 0.5:
            self._last_postfix = now
            self._bar.set_postfix_str(f"{nbytes / 1e6 / max(now - self._started, 1e-9):.1f} MB/s", refresh=False)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(
                f"{self._bytes / 1e6 / max(time.monotonic() - self._started, 1e-9):.1f} MB/s", refresh=False)
            self._bar.close()
