"""The shard sink: writes one planned shard through a format, durably, and records it as done.

It owns everything a format would otherwise copy: temp name, fsync, rename, hashing,
the ShardEntry facts, and the skipped inputs of that shard.
"""
from __future__ import annotations

import errno
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ..errors import ConversionError
from ..formats import get_format
from ..formats.base import FormatOptions
from ..integrity import FolderSync, fsync_path, hash_open_file, hash_shard_file, temp_path
from ..runtime.fault_points import kill_point
from .journal import Journal
from ..manifest import SHARDS_DIR
from .plan import ShardTask
from ..records import NO_LABEL, EncodedRows
from ..schema import SampleSchema
from ..sources.base import ConvertedRun, Skipped, Source

ProgressFn = Callable[[int, int], None]
#: Samples between two progress reports of one shard: a report takes a lock (workers) or looks
#: at the clock and for Ctrl-C (one process), which costs as much as storing a small image.
PROGRESS_EVERY = 64


@dataclass
class SinkContext:
    """What every shard write needs; sent once to each worker process."""

    dst: str
    source: Source
    format_name: str
    schema: SampleSchema
    format_options: Dict[str, Any]      # the reader's, recorded in the manifest
    writer_options: FormatOptions = field(default_factory=FormatOptions)
    on_error: str = "skip"
    #: skipped inputs this shard may still have (what is left of --max-errors); None: no limit
    max_errors: Optional[int] = None
    #: the --max-errors the user gave, for messages
    error_limit: Optional[int] = None
    #: the planned order (--order shuffled): position p of the plan is source item order[p];
    #: None: source order
    order: Optional[np.ndarray] = None
    #: the dataset's identity, stamped into every shard (manifest.md)
    dataset_id: str = ""


@dataclass
class ShardResult:
    """A finished shard: its file facts, skipped inputs and summary counts (the done record)."""

    shard: int
    path: str
    num_samples: int
    size: int
    sha256: str
    source_bytes: int = 0
    skipped: List[Dict[str, Any]] = field(default_factory=list)
    tags: Dict[str, int] = field(default_factory=dict)
    #: samples per label (JSON keys, so strings); unlabeled samples are not counted
    labels: Dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ShardResult":
        return cls(**data)


def reusable_result(dst: str, task: ShardTask, extension: str, record: Any) -> Optional[ShardResult]:
    """The ShardResult of a done record that `--resume` may reuse, or None.

    The journal is untrusted like the rest of DST: the record must name exactly this task's
    shard path, with fields of the right types and a count within the task, and the file must
    be a regular file inside DST whose sha256 still matches.
    """
    if not isinstance(record, dict) or set(record) != set(ShardResult.__dataclass_fields__):
        return None
    ints = [record[name] for name in ("shard", "num_samples", "size", "source_bytes")]
    if any(type(value) is not int or value < 0 for value in ints) or record["shard"] != task.shard \
            or record["num_samples"] > task.stop - task.start or record["path"] != shard_relpath(task, extension):
        return None
    digest, skipped, tags = record["sha256"], record["skipped"], record["tags"]
    if not (isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
            and isinstance(skipped, list) and all(isinstance(item, dict) for item in skipped)
            and isinstance(tags, dict) and all(isinstance(k, str) and type(v) is int for k, v in tags.items())):
        return None
    try:
        if hash_shard_file(Path(dst) / record["path"], dst, record["size"]) != digest:
            return None
    except (OSError, ValueError):
        return None
    return ShardResult.from_dict(record)


def shard_relpath(task: ShardTask, extension: str) -> str:
    """shards/shard-00000.h5 style path relative to DST."""
    return f"{SHARDS_DIR}/{task.name}{extension}"


def planned_items(order: Optional[np.ndarray], task: ShardTask) -> np.ndarray:
    """The source items of a task's plan positions [start, stop), in the order they are written."""
    if order is None:
        return np.arange(task.start, task.stop, dtype=np.int64)
    return order[task.start:task.stop]


def write_shard(ctx: SinkContext, task: ShardTask, progress: Optional[ProgressFn] = None) -> ShardResult:
    """Encode the task's planned items into DST/shards/<stem>; temp name, fsync, rename, hash, record.

    A failure to write (disk full, file size limit, I/O error — whatever the format's library
    raises) becomes a ConversionError naming the shard; the temporary file is removed and no
    done record is written, so `--resume` redoes this shard.
    """
    result = write_shard_file(ctx, task, progress).commit()
    assert result is not None       # never cancelled
    return result


@dataclass
class WrittenShard:
    """A shard whose bytes are in its temporary file (not yet fsynced): commit() makes it count."""

    dst: str
    task: ShardTask
    tmp: Path
    final: Path
    result: ShardResult

    def commit(self, cancelled: Callable[[], bool] = lambda: False,
               sync_folder: Optional[FolderSync] = None) -> Optional[ShardResult]:
        """fsync the file, rename it to its final name, fsync shards/, hash it, then write the done
        record: a shard counts as done only once its bytes and its name are durable. Safe to run
        in another thread, several shards at once (their fsyncs overlap; with a shared
        sync_folder, one fsync of shards/ serves the renames made before it). None, with the file
        removed, when cancelled() holds before the rename (the run was stopped: --resume redoes it)."""
        try:
            # hashed from the open file while its bytes are made durable (the sha256 is a read of
            # the page cache, the fsync waits on the disk), not after
            with open(self.tmp, "rb") as handle, ThreadPoolExecutor(1, "shardkit-hash") as hasher:
                fd = handle.fileno()
                digest = hasher.submit(hash_open_file, fd, self.final, os.fstat(fd).st_size)
                fsync_path(self.tmp)
                if cancelled():
                    _unlink_quietly(self.tmp)
                    return None
                os.replace(self.tmp, self.final)
                (sync_folder or fsync_path)(self.final.parent)
                self.result.sha256 = digest.result()
            Journal(self.dst).write_done(self.task.name, self.result.to_dict())
        except OSError as exc:
            _unlink_quietly(self.tmp)
            raise write_failure(self.final, self.task, exc) from None
        return self.result


class _Tally:
    """What a shard's items came to (samples, source bytes, skipped inputs, tags, labels), with
    progress reported every PROGRESS_EVERY items; --on-error fail and the --max-errors left to this
    shard are enforced as skips come."""

    def __init__(self, ctx: SinkContext, progress: Optional[ProgressFn]) -> None:
        self.ctx, self.progress = ctx, progress
        self.skipped: List[Skipped] = []
        self.tags: Counter = Counter()
        self.labels: Counter = Counter()
        self.count = self.source_bytes = 0
        self._unreported = [0, 0]             # items and source bytes not yet given to progress

    def skip(self, outcome: Skipped) -> None:
        self.skipped.append(outcome)
        if self.ctx.on_error == "fail":
            raise outcome.failure("--on-error fail")
        if self.ctx.max_errors is not None and len(self.skipped) > self.ctx.max_errors:
            raise ConversionError(f"more than {self.ctx.error_limit} inputs failed (--max-errors); "
                                  f"last: {outcome.message()}", path=outcome.path)
        self._report(1, 0)

    def add(self, outcome: Any) -> None:
        """Count a Converted sample or a ConvertedRun the writer has just taken."""
        if isinstance(outcome, ConvertedRun):
            self.count += len(outcome.samples)
            if isinstance(outcome.samples, EncodedRows):
                count_labels(self.labels, outcome.samples.labels)
            else:
                self.labels.update([sample.label for sample in outcome.samples])
            self.tags.update(tag for tag in outcome.tags if tag)
            items = len(outcome.samples)
        else:
            self.count += 1
            self.labels[outcome.sample.label] += 1
            if outcome.tag:
                self.tags[outcome.tag] += 1
            items = 1
        self.source_bytes += outcome.source_bytes
        self._report(items, outcome.source_bytes)

    def _report(self, items: int, nbytes: int) -> None:
        self._unreported[0] += items
        self._unreported[1] += nbytes
        if self.progress and self._unreported[0] >= PROGRESS_EVERY:
            self.flush()

    def flush(self) -> None:
        """Report what is not reported yet."""
        if self.progress and self._unreported[0]:
            self.progress(*self._unreported)
            self._unreported[:] = [0, 0]

    def result(self, task: ShardTask, rel: str, size: int) -> ShardResult:
        return ShardResult(shard=task.shard, path=rel, num_samples=self.count, size=size, sha256="",
                           source_bytes=self.source_bytes, skipped=[item.to_dict() for item in self.skipped],
                           tags=dict(sorted(self.tags.items())),
                           labels={str(label): number for label, number in sorted(self.labels.items())
                                   if label != NO_LABEL})


def write_shard_file(ctx: SinkContext, task: ShardTask, progress: Optional[ProgressFn] = None) -> WrittenShard:
    """The encoding half of write_shard: the task's items written to a temporary file, closed, with
    the facts of its done record except the sha256 (commit() adds it)."""
    fmt = get_format(ctx.format_name)
    rel = shard_relpath(task, fmt.extension)
    final = Path(ctx.dst) / rel
    tmp = temp_path(final)
    tally = _Tally(ctx, progress)
    try:
        _unlink_quietly(tmp)
        writer = fmt.open_writer(str(tmp), ctx.schema, ctx.writer_options, ctx.dataset_id)
    except Exception as exc:  # noqa: BLE001 - any library's failure to create the file
        raise write_failure(final, task, exc) from None
    try:
        for outcome in ctx.source.encode_items(planned_items(ctx.order, task)):
            if isinstance(outcome, Skipped):
                tally.skip(outcome)
                continue
            try:
                if isinstance(outcome, ConvertedRun):
                    writer.append_many(outcome.samples)
                else:
                    writer.append(outcome.sample)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                raise write_failure(final, task, exc) from None
            tally.add(outcome)
        tally.flush()
        try:
            writer.close()
        except Exception as exc:  # noqa: BLE001 - see the docstring
            raise write_failure(final, task, exc) from None
    except BaseException:
        writer.abort()
        _unlink_quietly(tmp)
        raise
    try:
        size = os.path.getsize(tmp)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise write_failure(final, task, exc) from None
    kill_point("shard-written", str(final))      # tests only: a writer killed with its file not yet committed
    return WrittenShard(ctx.dst, task, tmp, final, tally.result(task, rel, size))


#: errno values that say plainly the place cannot be written (never a full disk).
NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR,
                errno.ENAMETOOLONG)
#: errno values that mean "no room": full disk, file size limit, quota.
_NO_ROOM = (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC))
#: Free bytes below which a failed write is put down to a full file system.
NEARLY_FULL = 1 << 20


def count_labels(counter: Counter, labels: np.ndarray) -> None:
    """Add the count of each label of a run to counter, in one numpy pass (not a step per row)."""
    if not len(labels):
        return
    low, high = int(labels.min()), int(labels.max())
    if high - low < 1 << 16:
        counts = np.bincount(labels - low)
        found = np.flatnonzero(counts)
        values, numbers = found + low, counts[found]
    else:
        values, numbers = np.unique(labels, return_counts=True)
    counter.update(dict(zip(values.tolist(), numbers.tolist())))


def write_failure(final: Path, task: ShardTask, exc: BaseException) -> ConversionError:
    """The one-line error for a shard that could not be written, with what to do next."""
    return ConversionError(f"cannot write shard {task.shard} {explain_write_failure(exc, final.parent)}",
                           path=str(final))


def explain_write_failure(exc: BaseException, folder: Path) -> str:
    """'(reason); no manifest was written — what to do' for a failed write into folder.

    Libraries often hide the errno (h5py buries "errno = 28" in a long text, LMDB says
    "Input/output error", torch "unexpected pos"), so when the exception does not say,
    the file system's free space and this process's file size limit are looked at.
    """
    code, why = _errno_in(exc), ""
    if code is None and not (isinstance(exc, OSError) and exc.errno in NOT_WRITABLE):
        code, why = _room_now(folder)
    if code is None:
        text = str(exc).strip()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror and exc.errno is not None else \
            f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
        return f"({reason}); no manifest was written — run the same command with --resume to finish"
    return (f"({os.strerror(code)}{why}); no manifest was written — free some space (or raise the file size "
            "limit), then run the same command with --resume to finish")


def _errno_in(exc: BaseException) -> Optional[int]:
    text = str(exc)
    for code in _NO_ROOM:
        if (isinstance(exc, OSError) and exc.errno == code) or os.strerror(code) in text \
                or f"errno = {code}," in text:
            return code
    return None


def _room_now(folder: Path) -> "tuple[Optional[int], str]":
    """(ENOSPC, detail) if the file system is (nearly) full now, (EFBIG, detail) if this process
    has a file size limit (ulimit -f), else (None, "")."""
    try:
        stat = os.statvfs(folder)
        free = stat.f_bavail * stat.f_frsize
        if free < NEARLY_FULL:
            return errno.ENOSPC, f": {free} bytes free"
    except OSError:
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None, ""
    if soft != resource.RLIM_INFINITY:
        return errno.EFBIG, f": the file size limit (ulimit -f) is {soft} bytes"
    return None, ""


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
