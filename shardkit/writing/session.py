"""A conversion session: DST claimed (its lock and journal), Ctrl-C latched, and the clean-up that
each way of ending needs, in one context manager. Whatever happens inside the `with` block, the
lock is released, the latch restored, and DST left either complete (manifest written last) or
resumable, never looking complete when it is not."""
from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Tuple

from ..errors import (ConversionError, ConversionInterrupted, EmptySourceError, ShardkitError,
                      UnguardedMainError, UsageError)
from ..integrity import atomic_write_bytes
from ..manifest import SKIPPED_NAME, Manifest
from ..options import RunOptions
from ..runtime.interrupt import SigintLatch
from .journal import Journal, claim_destination, remove_outputs, remove_stale_temps
from .plan import ShardTask
from .sink import NOT_WRITABLE, ShardResult, explain_write_failure, reusable_result
from .table_writer import write_sample_table


class ConversionSession:
    """`with ConversionSession(dst, run) as session:` claims DST (lock first, then the emptiness
    rules of --overwrite and --resume) and latches Ctrl-C; leaving the block turns a Ctrl-C into
    ConversionInterrupted (temporary files removed, finished shards kept for --resume), removes what
    an empty or unstartable run made, and releases the lock and the latch."""

    def __init__(self, dst: str, run: RunOptions, complete: bool = False) -> None:
        """complete: DST holds a finished dataset being repaired (--resume): only the lock is
        taken, since DST is rightly not empty and has no journal."""
        self.dst = dst
        self.run = run
        self.latch = SigintLatch()
        self._complete = complete
        self._created_dst = not os.path.lexists(dst)
        self.journal = Journal(dst)

    def __enter__(self) -> "ConversionSession":
        try:
            if self._complete:
                self.journal.lock()
            else:
                self.journal = claim_destination(self.dst, overwrite=self.run.overwrite, resume=self.run.resume)
        except OSError as exc:
            if isinstance(exc, ShardkitError):
                raise
            raise destination_failure(self.dst, exc) from None
        self.latch.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        try:
            if exc is not None:
                self._clean_up(exc)
        finally:
            self.latch.__exit__(None, None, None)
            if self._complete and exc is not None:
                self.journal.remove()           # a finished dataset has no journal: leave none behind
            self.journal.unlock()

    def _clean_up(self, exc: BaseException) -> None:
        """Raise what exc means for the user, after tidying DST for it (returns for the others)."""
        # A Ctrl-C, or one that a library turned into an error of its own (torch.save: a RuntimeError
        # "unexpected pos") which the sink reported as a failed write: the run was interrupted.
        if isinstance(exc, KeyboardInterrupt) or (isinstance(exc, ConversionError) and self.latch.hit):
            remove_stale_temps(self.dst)
            raise ConversionInterrupted(self.dst) from None
        if isinstance(exc, EmptySourceError):
            # Nothing usable: leave no trace that could pass for a dataset.
            if self._created_dst:
                shutil.rmtree(self.dst, ignore_errors=True)
            else:
                remove_outputs(self.dst)
        elif isinstance(exc, UnguardedMainError):
            # No worker started, so no shard was written: a DST made by this run goes again, and the
            # same call works once the script is fixed.
            if self._created_dst:
                shutil.rmtree(self.dst, ignore_errors=True)
        elif isinstance(exc, OSError) and not isinstance(exc, ShardkitError):
            raise destination_failure(self.dst, exc) from None

    def start(self, fingerprint: str) -> str:
        """Record the plan of a fresh run, or check that a resumed run has the same plan; the
        dataset's creation time (the first run's, when resumed)."""
        previous = self.journal.read_plan()
        if self.run.resume and previous is not None:
            if previous.get("fingerprint") != fingerprint:
                raise UsageError("SRC or options differ from the interrupted run; "
                                 "resume with the same ones, or use --overwrite to start over", path=self.dst)
            created = str(previous["created"])
        else:
            created = creation_time()
            self.journal.clear_done()
            self.journal.write_plan({"fingerprint": fingerprint, "created": created})
        remove_stale_temps(self.dst)
        return created

    def split_done(self, tasks: List[ShardTask], extension: str) -> Tuple[List[ShardResult], List[ShardTask]]:
        """Finished shards (a well-formed done record for exactly this shard, whose file still has
        the recorded size and sha256) and the tasks still to do."""
        done: List[ShardResult] = []
        pending: List[ShardTask] = []
        for task in tasks:
            result = reusable_result(self.dst, task, extension, self.journal.read_done(task.name))
            if result is not None:
                done.append(result)
            else:
                pending.append(task)
        return done, pending

    def finish(self, manifest: Manifest, skipped_lines: List[Dict[str, Any]]) -> None:
        """Write skipped.jsonl, the sample table and, last, the manifest; then drop the journal."""
        write_skipped(self.dst, skipped_lines)
        manifest.sample_table = write_sample_table(self.dst, manifest)
        self.latch.check()                     # a Ctrl-C swallowed anywhere so far still stops here
        manifest.save(self.dst)
        self.journal.remove()


def write_skipped(dst: str, lines: List[Dict[str, Any]]) -> None:
    text = "".join(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n" for line in lines)
    atomic_write_bytes(Path(dst) / SKIPPED_NAME, text.encode("utf-8", "surrogateescape"))


def creation_time() -> str:
    """Now (UTC, whole seconds), or SOURCE_DATE_EPOCH when set, so two runs can agree byte for byte."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not epoch:
        moment = datetime.datetime.now(datetime.timezone.utc)
    elif epoch.isdigit():
        moment = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
    else:
        raise UsageError(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, not {epoch!r}")
    return moment.replace(microsecond=0).isoformat()


def destination_failure(dst: str, exc: OSError) -> ShardkitError:
    """A write outside any shard (DST itself, the journal, skipped.jsonl, the manifest) failed.
    A DST that cannot be written at all (read-only, no permission, not a real folder) is a usage
    error that --resume cannot help."""
    where = exc.filename if isinstance(exc.filename, str) else dst
    if exc.errno in NOT_WRITABLE:
        return UsageError(f"cannot write ({exc.strerror}); DST must be a folder this user can "
                          "write on a writable file system", path=where)
    return ConversionError(f"cannot write {explain_write_failure(exc, Path(where).parent)}", path=where)


__all__ = ["ConversionSession", "creation_time", "destination_failure", "write_skipped"]
