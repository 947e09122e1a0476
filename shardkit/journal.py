"""DST/.shardkit: the conversion's lock, its plan record and one 'done' record per finished shard.

These make a killed conversion resumable: a shard with a done record and a file of the recorded
size is finished; anything else is redone. The folder is removed once the manifest is written.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

from .errors import LockedError
from .integrity import PathLike, atomic_write_json

JOURNAL_DIR = ".shardkit"


class Journal:
    """Access to DST/.shardkit for one conversion."""

    def __init__(self, dst: PathLike) -> None:
        self.root = Path(dst) / JOURNAL_DIR
        self._lock_fd: Optional[int] = None

    @property
    def done_dir(self) -> Path:
        return self.root / "done"

    def exists(self) -> bool:
        """Whether an unfinished conversion left a plan here."""
        return (self.root / "plan.json").is_file()

    @property
    def locked(self) -> bool:
        """Whether this object holds DST's lock."""
        return self._lock_fd is not None

    def lock_file_exists(self) -> bool:
        """Whether a conversion ever took the lock here (it may still hold it)."""
        return (self.root / "lock").is_file()

    def lock(self) -> None:
        """Take DST's exclusive lock, or raise LockedError if another conversion holds it."""
        self.done_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise LockedError(f"{self.root.parent}: another shardkit convert is writing here "
                                  f"(lock {self.root / 'lock'} is held); wait for it to finish or stop it first",
                                  path=str(self.root.parent)) from None
            raise
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the lock (also released when the process dies)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def read_plan(self) -> Optional[Dict[str, Any]]:
        """The plan record of an earlier run, if any."""
        try:
            return json.loads((self.root / "plan.json").read_text())
        except (OSError, ValueError):
            return None

    def write_plan(self, record: Dict[str, Any]) -> None:
        atomic_write_json(self.root / "plan.json", record)

    def read_done(self, stem: str) -> Optional[Dict[str, Any]]:
        """The done record of a shard, or None if it is missing or unreadable."""
        try:
            return json.loads((self.done_dir / f"{stem}.json").read_text())
        except (OSError, ValueError):
            return None

    def write_done(self, stem: str, record: Dict[str, Any]) -> None:
        atomic_write_json(self.done_dir / f"{stem}.json", record)

    def clear_done(self) -> None:
        """Forget every finished shard (a fresh, non-resumed run)."""
        shutil.rmtree(self.done_dir, ignore_errors=True)
        self.done_dir.mkdir(parents=True, exist_ok=True)

    def remove(self) -> None:
        """Delete the journal after the manifest is safely written. The plan goes first: a run
        killed halfway through leaves a manifest and no plan, which reads as complete."""
        try:
            (self.root / "plan.json").unlink()
        except OSError:
            pass
        self.unlock()
        shutil.rmtree(self.root, ignore_errors=True)
