"""DST/.shardkit: the conversion's lock, its plan record and one 'done' record per finished shard;
and claiming DST for a conversion (lock first, then the emptiness rules), tidying it after.

These make a killed conversion resumable: a shard with a done record and a file of the recorded
size is finished; anything else is redone. The folder is removed once the manifest is written.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import DestinationExistsError, LockedError, UsageError
from ..integrity import PathLike, atomic_write_json, json_bytes, replace_bytes
from ..manifest import MANIFEST_NAME, SHARDS_DIR, SKIPPED_NAME
from ..field_files import COLUMN_NAME, is_table_name
from ..sample_table import TABLE_NAME, TABLE_NAMES

JOURNAL_DIR = ".shardkit"
#: Inside the journal folder: where `convert --append` writes its shards before publishing them.
APPEND_DIR = "append"

#: The journals of this process that hold their DST's lock.
_LOCK_HOLDERS: "weakref.WeakSet[Journal]" = weakref.WeakSet()


def _drop_inherited_locks() -> None:
    """In a forked child (a shard writer): close the copies of DST lock descriptors the parent
    holds, so that only the parent holds each lock and it ends when the parent ends, not when
    its last child has gone too."""
    for journal in list(_LOCK_HOLDERS):
        journal.unlock()


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

    def check_unlocked(self) -> None:
        """Raise LockedError now if another conversion holds the lock, before any slow work
        (scanning a large SRC); the lock itself is taken later, in claim_destination."""
        if self.lock_file_exists():
            self.lock()
            self.unlock()

    def lock(self) -> None:
        """Take DST's exclusive lock, or raise LockedError if another conversion holds it."""
        refuse_links(self.root.parent)
        self.done_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise LockedError(str(self.root.parent), str(self.root / "lock")) from None
            raise
        self._lock_fd = fd
        _LOCK_HOLDERS.add(self)

    def unlock(self) -> None:
        """Release the lock (also released when the process dies); in a forked child, close the
        child's copy of the descriptor (the lock ends when no process holds one)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        _LOCK_HOLDERS.discard(self)

    def read_plan(self) -> Optional[Dict[str, Any]]:
        """The plan record of an earlier run, if any."""
        try:
            return json.loads((self.root / "plan.json").read_text())
        except (OSError, ValueError, RecursionError):
            return None

    def write_plan(self, record: Dict[str, Any]) -> None:
        atomic_write_json(self.root / "plan.json", record)

    def read_done(self, stem: str) -> Optional[Dict[str, Any]]:
        """The done record of a shard, or None if it is missing or unreadable."""
        try:
            return json.loads((self.done_dir / f"{stem}.json").read_text())
        except (OSError, ValueError, RecursionError):
            return None

    def write_done(self, stem: str, record: Dict[str, Any]) -> None:
        """Record a finished shard. Not fsynced: a record lost or torn by a crash only makes
        --resume redo its shard, and a record is reused only if its shard's file, made durable
        before the record was written, still has the recorded sha256 (sink.reusable_result)."""
        replace_bytes(self.done_dir / f"{stem}.json", json_bytes(record))

    def clear_done(self) -> None:
        """Forget every finished shard (a fresh, non-resumed run)."""
        refuse_links(self.root.parent)
        shutil.rmtree(self.done_dir, ignore_errors=True)
        self.done_dir.mkdir(parents=True, exist_ok=True)

    def remove(self) -> None:
        """Delete the journal after the manifest is safely written. The plan goes first: a run
        killed halfway through leaves a manifest and no plan, which reads as complete."""
        refuse_links(self.root.parent)
        try:
            (self.root / "plan.json").unlink()
        except OSError:
            pass
        self.unlock()
        shutil.rmtree(self.root, ignore_errors=True)


# ---- DST as a whole: claiming it for a conversion, and tidying it -------------------------
#: Temporary names of atomic writes and of shards being written (integrity.temp_path).
_TEMP_NAME = re.compile(r"^\..+\.tmp(-[0-9a-f]+)?$")
_TOP_LEVEL = {**dict.fromkeys((MANIFEST_NAME, SKIPPED_NAME, TABLE_NAME), "file"), SHARDS_DIR: "folder",
              JOURNAL_DIR: "folder"}
#: A shard's stem (a part's shards carry its number) and a column's part of a field file's or done
#: record's name (`.caption`, `.boxes.shape`, `.fields`: a dataset of named fields, field_files.py).
_STEM = rf"(part-\d{{5,}}-)?shard-\d{{5,}}(\.{COLUMN_NAME})?"


def _files_matching(pattern: str) -> Callable[[str], Optional[str]]:
    matcher = re.compile(pattern)
    return lambda name: "file" if matcher.fullmatch(name) else None


#: What shardkit writes in each of its folders, as name -> "file", "folder" or None (not its own):
#: top-level names, each column's sample table and an append's tables, shard files, the journal's lock, plan and done
#: records. Deepest last: remove_outputs empties them deepest first.
_OWN_FOLDERS: Tuple[Tuple[str, Callable[[str], Optional[str]]], ...] = (
    ("", lambda name: _TOP_LEVEL.get(name) or ("file" if is_table_name(name) or TABLE_NAMES.match(name) else None)),
    (SHARDS_DIR, _files_matching(_STEM + r"\.[a-z0-9]+")),
    (JOURNAL_DIR, {"lock": "file", "plan.json": "file", "done": "folder", APPEND_DIR: "folder"}.get),
    (f"{JOURNAL_DIR}/done", _files_matching(_STEM + r"\.json")),
)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
#: What shardkit writes, renames or deletes inside DST; none of it may be a symbolic link.
_LINK_CHECKED = (SHARDS_DIR, JOURNAL_DIR, f"{JOURNAL_DIR}/done", f"{JOURNAL_DIR}/lock", f"{JOURNAL_DIR}/plan.json",
                 MANIFEST_NAME, SKIPPED_NAME, TABLE_NAME)


def refuse_links(dst: PathLike) -> None:
    """UsageError if any of shardkit's own entries in DST is a symbolic link: writing, emptying or
    deleting through it would touch files outside DST."""
    for rel in _LINK_CHECKED:
        path = os.path.join(dst, rel)
        if os.path.islink(path):
            raise UsageError("is a symbolic link; shardkit writes and deletes only its own files "
                             "inside DST and refuses to follow links there (remove the link)", path=path)


def claim_destination(dst: str, overwrite: bool, resume: bool) -> Journal:
    """Take DST's lock and refuse a non-empty DST without overwrite or resume; the locked Journal.

    The lock comes first, so a second `convert` into a DST that is being written is told so
    (LockedError, exit 1) whatever its options.
    """
    path = Path(dst)
    if path.exists() and not path.is_dir():
        raise UsageError("exists and is not a directory", path=dst)
    refuse_links(dst)
    journal = Journal(dst)
    if journal.lock_file_exists():
        journal.lock()
    try:
        _check_destination(path, overwrite, resume, journal)
        (path / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
        if not journal.locked:
            journal.lock()
        if overwrite:
            remove_outputs(dst, keep_lock=True)
            (path / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
    except BaseException:
        journal.unlock()
        raise
    return journal


def _check_destination(path: Path, overwrite: bool, resume: bool, journal: Journal) -> None:
    dst = str(path)
    entries = sorted(os.listdir(dst)) if path.is_dir() else []
    if entries and not (overwrite or resume):
        raise DestinationExistsError("is not empty; pass --overwrite to replace it or --resume to "
                                     "continue an interrupted conversion", path=dst)
    foreign = foreign_entries(dst) if entries else []
    if foreign and overwrite:
        raise DestinationExistsError(f"holds files shardkit did not write ({', '.join(foreign[:3])}"
                                     f"{', ...' if len(foreign) > 3 else ''}); refusing to delete them — "
                                     "move them out of DST, or choose an empty DST", path=dst)
    if entries and resume and not journal.exists():
        if [name for name in foreign if "/" not in name] or (path / MANIFEST_NAME).exists():
            raise UsageError("nothing to resume here (no unfinished conversion); "
                             "use --overwrite to start over", path=dst)
        # Killed before its plan was recorded: nothing can be finished, so start afresh.


def foreign_entries(dst: PathLike) -> List[str]:
    """Paths (relative to DST) of what shardkit did not write there: anything at the top but its
    own entries, anything in shards/ but shard files, anything in the journal but its lock, plan
    and done records (temporary files of its atomic writes count as its own)."""
    foreign = []
    for rel, own in _OWN_FOLDERS:
        folder = os.path.join(dst, rel) if rel else os.fspath(dst)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if _TEMP_NAME.match(entry.name) and not entry.is_dir(follow_symlinks=False):
                continue
            wanted = own(entry.name)
            if wanted is None or (entry.is_dir(follow_symlinks=False) != (wanted == "folder")):
                foreign.append(name)
    return sorted(foreign)


def remove_stale_temps(dst: str) -> None:
    """Delete temporary files a killed or interrupted run left in DST, shards/ and the journal."""
    refuse_links(dst)
    for folder in (Path(dst), Path(dst) / SHARDS_DIR, Path(dst) / JOURNAL_DIR, Path(dst) / JOURNAL_DIR / "done"):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if _TEMP_NAME.match(name):
                try:
                    (folder / name).unlink()
                except OSError:
                    pass


def remove_outputs(dst: str, keep_lock: bool = False) -> None:
    """Delete what a conversion writes in DST (and its journal unless keep_lock); never a file it
    did not write (foreign_entries), nor a folder that still holds one."""
    refuse_links(dst)
    foreign = set(foreign_entries(dst))
    for rel, _ in reversed(_OWN_FOLDERS):           # deepest first, so each folder can go once empty
        if keep_lock and rel.startswith(JOURNAL_DIR):
            continue
        folder = os.path.join(dst, rel)
        for name in _names(folder):
            target = os.path.join(folder, name)
            if (f"{rel}/{name}" if rel else name) not in foreign and not os.path.isdir(target):
                os.unlink(target)
        if rel:
            try:
                os.rmdir(folder)
            except OSError:         # it still holds what shardkit did not write
                pass


def _names(folder: str) -> List[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)
