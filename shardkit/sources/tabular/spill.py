"""The parsed rows of a CSV source, kept in temporary files between the scan and the shards.

A table is split into fields once, during the scan: every row's feature
vector (category columns as provisional ids, in order of first appearance, until the sorted
vocabulary is known), label, and text part go into fixed-width records on disk, and bad rows
keep their line and reason. Shards are then cut from these records, by row number, from any
worker process, without parsing the CSV again. The files live in a fresh folder under the
system temporary directory (TMPDIR), named after the process that uses them (the scan's parent
when worker processes parse the files), and are removed when the conversion ends; folders left
by a killed process are removed by the next scan in the same pid namespace on the same host.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ...errors import ConversionError

ROWS_NAME = "rows.bin"
TEXTS_NAME = "texts.bin"
SKIPS_NAME = "skips.jsonl"
LINES_NAME = "lines.bin"
PREFIX = "shardkit-csv-"


def record_type(dtype: str, features: int, texts: bool) -> np.dtype:
    """One row on disk: its vector, label, where its skip note is (-1: none) and where its text part ends."""
    fields = [("vector", np.dtype(dtype).newbyteorder("<"), (features,)), ("label", "<i8"), ("skip", "<i8")]
    if texts:
        fields.append(("text_end", "<i8"))
    return np.dtype(fields)


@dataclass
class SpilledRows:
    """Rows [start, stop) read back: vectors, labels, text parts (None without text columns),
    {row - start: (line, reason)} for the bad ones, and the line each row starts on where the
    scan recorded them (None: row i is on the part's first data line + i)."""

    vectors: np.ndarray
    labels: np.ndarray
    tails: Optional[List[bytes]]
    bad: Dict[int, Tuple[int, str]]
    lines: Optional[np.ndarray] = None


class Spill:
    """Writes rows in order during the scan (append), then reads any range of them (read)."""

    def __init__(self, dtype: str, features: int, texts: bool, owner: Optional[int] = None, tag: str = "",
                 directory: Optional[str] = None) -> None:
        """owner: the process that will use and remove the files (a scan's parent, when a worker
        process writes them); tag: shared by the spills of one scan, so that scan can remove them all;
        directory: where (the owner's temporary directory; by default this process's)."""
        directory = directory or tempfile.gettempdir()
        remove_orphans(directory)
        self.record = record_type(dtype, features, texts)
        self.texts = texts
        self.rows = 0
        self.has_lines = False
        self._owner = os.getpid() if owner is None else owner
        self._text_bytes = 0
        self._skip_bytes = 0
        self._writers: List[BinaryIO] = []
        prefix = spill_prefix(self._owner, tag)
        self.folder = os.path.join(directory, prefix)
        with self._writing():
            self.folder = tempfile.mkdtemp(prefix=prefix, dir=directory)
            self._writers = [open(os.path.join(self.folder, name), "wb")
                             for name in (ROWS_NAME, TEXTS_NAME, SKIPS_NAME)]

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A failed write (full disk, no TMPDIR) becomes one error saying where and what to do."""
        try:
            yield
        except OSError as exc:
            self.discard()
            raise ConversionError(f"cannot write the parsed CSV rows ({exc.strerror or exc}); "
                                  "free space there or set TMPDIR to a folder on a disk with room "
                                  "(about the size of the output)", path=self.folder) from None

    def __getstate__(self) -> Dict[str, object]:
        state = dict(self.__dict__)
        state["_writers"] = []
        return state

    # ---- writing (the scan) ---------------------------------------------------------------
    def append(self, vectors: np.ndarray, labels: Optional[np.ndarray], tails: Optional[List[bytes]],
               bad: Dict[int, Tuple[int, str]]) -> None:
        """Add len(vectors) rows; bad maps a row's index among them to its (line, reason)."""
        with self._writing():
            self._append(vectors, labels, tails, bad)

    def _append(self, vectors: np.ndarray, labels: Optional[np.ndarray], tails: Optional[List[bytes]],
                bad: Dict[int, Tuple[int, str]]) -> None:
        rows, texts, skips = self._writers
        block = np.empty(len(vectors), dtype=self.record)      # every field is set below
        block["vector"] = vectors
        block["label"] = -1 if labels is None else labels
        block["skip"] = -1
        for index in sorted(bad):
            line, reason = bad[index]
            note = (json.dumps([line, reason]) + "\n").encode("ascii")
            block["skip"][index] = self._skip_bytes
            skips.write(note)
            self._skip_bytes += len(note)
        if self.texts:
            assert tails is not None
            ends = np.cumsum([len(tail) for tail in tails], dtype=np.int64) + self._text_bytes
            block["text_end"] = ends
            texts.write(b"".join(tails))
            self._text_bytes = int(ends[-1]) if len(ends) else self._text_bytes
        rows.write(memoryview(block).cast("B"))
        self.rows += len(block)

    def set_lines(self, lines: np.ndarray) -> None:
        """Record the line each row starts on (one int64 per row, written once every row is in)."""
        with self._writing():
            np.asarray(lines, dtype="<i8").tofile(os.path.join(self.folder, LINES_NAME))
        self.has_lines = True

    def finish(self) -> None:
        """Close the files written by the scan; reading may start."""
        with self._writing():
            for handle in self._writers:
                handle.close()
            self._writers = []

    # ---- reading (the shards) ---------------------------------------------------------------
    def read(self, start: int, stop: int) -> SpilledRows:
        """Rows [start, stop) as written."""
        try:
            return self._read(start, stop)
        except OSError as exc:
            raise ConversionError(f"cannot read the parsed CSV rows back ({exc.strerror or exc}); "
                                  "were they removed during the conversion?", path=self.folder) from None

    def _read(self, start: int, stop: int) -> SpilledRows:
        first = max(0, start - 1) if self.texts else start       # the row before tells where texts begin
        block = np.fromfile(os.path.join(self.folder, ROWS_NAME), dtype=self.record, count=stop - first,
                            offset=first * self.record.itemsize)
        text_start = int(block["text_end"][0]) if self.texts and first < start else 0
        block = block[start - first:]
        if len(block) != stop - start:
            raise OSError(f"{self.folder}: temporary rows file is shorter than expected (removed meanwhile?)")
        tails = None
        if self.texts:
            ends = block["text_end"].tolist()
            with open(os.path.join(self.folder, TEXTS_NAME), "rb") as handle:
                handle.seek(text_start)
                data = handle.read((ends[-1] if ends else text_start) - text_start)
            starts = [text_start] + ends[:-1]
            tails = [data[begin - text_start:end - text_start] for begin, end in zip(starts, ends)]
        bad: Dict[int, Tuple[int, str]] = {}
        marked = np.flatnonzero(block["skip"] >= 0)
        if len(marked):
            with open(os.path.join(self.folder, SKIPS_NAME), "rb") as handle:
                for index in marked.tolist():
                    handle.seek(int(block["skip"][index]))
                    line, reason = json.loads(handle.readline())
                    bad[index] = (int(line), reason)
        lines = None
        if self.has_lines:
            lines = np.fromfile(os.path.join(self.folder, LINES_NAME), dtype="<i8", count=stop - start,
                                offset=start * 8).astype(np.int64)
            if len(lines) != stop - start:
                raise OSError(f"{self.folder}: temporary lines file is shorter than expected (removed meanwhile?)")
        return SpilledRows(np.array(block["vector"]), np.array(block["label"]), tails, bad, lines)

    def remove(self) -> None:
        """Delete the files, in the owner process (the shard writers merely read them)."""
        if os.getpid() == self._owner:
            self.discard()

    def discard(self) -> None:
        """Delete the files now, whichever process this is (a scan worker that failed)."""
        for handle in self._writers:
            try:
                handle.close()
            except OSError:
                pass
        self._writers = []
        shutil.rmtree(self.folder, ignore_errors=True)


def spill_prefix(owner: int, tag: str = "") -> str:
    """Folder name prefix of the spills of process `owner` (and of one scan, with its tag): the pid
    and which process-id space it counts in (pid namespace and host), so that only a process that
    sees the same pids judges whether the owner is gone."""
    return f"{PREFIX}{owner}.{pid_space()}-{tag + '-' if tag else ''}"


def pid_space() -> str:
    """8 hex digits naming this process's pid namespace on this host (TMPDIR may be shared by
    containers, or by hosts on a network file system, whose pids mean other processes)."""
    import hashlib
    import socket
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:8]


def remove_spills(owner: int, tag: str, directory: str) -> None:
    """Remove every spill folder of one scan (some may have been made by workers it stopped)."""
    prefix = spill_prefix(owner, tag)
    _remove_where(directory, lambda name: name.startswith(prefix))


def remove_orphans(parent: Optional[str] = None) -> List[str]:
    """Remove spill folders whose process is gone (killed mid-conversion); the removed paths."""
    space = pid_space()

    def orphaned(name: str) -> bool:
        pid, _, owner_space = name[len(PREFIX):].split("-", 1)[0].partition(".")
        return name.startswith(PREFIX) and pid.isdigit() and owner_space == space and not _alive(int(pid))
    return _remove_where(parent or tempfile.gettempdir(), orphaned)


def _remove_where(parent: str, chosen: Callable[[str], bool]) -> List[str]:
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    removed = [os.path.join(parent, name) for name in names if chosen(name)]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:                 # exists, but belongs to another user
        return True
    return True


__all__ = ["PREFIX", "Spill", "SpilledRows", "record_type", "remove_orphans", "remove_spills", "spill_prefix"]
