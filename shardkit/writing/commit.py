"""CommitPipeline: makes written shards durable in background threads while the next shard is
encoded, so their fsyncs overlap (a file system commits concurrent fsyncs together) instead of
costing several milliseconds each, one after another."""
from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, List, Set

from ..integrity import SharedFolderSync
from .sink import ShardResult, WrittenShard

#: Shards being committed at once: enough for the file system to group their fsyncs; each holds
#: only a finished file's name, no samples.
COMMIT_THREADS = 8


class CommitPipeline:
    """submit() a WrittenShard, get back the results of the commits that finished meanwhile; finish()
    waits for the rest. A failed commit's error is raised by the next submit() or finish(). Leaving
    the `with` block waits for every commit, so none outlives the run; left by Ctrl-C
    (KeyboardInterrupt), commits not yet at their rename are dropped with their files, so an
    interrupted run stops at once and counts no shard it had not finished. After an error the
    commits under way finish, so --resume keeps their shards."""

    def __init__(self, threads: int = COMMIT_THREADS, interrupted: Callable[[], bool] = lambda: False) -> None:
        """interrupted(): whether a Ctrl-C has come (the latch's), read by each commit just before
        its rename, so none is renamed once the Ctrl-C is seen, not only once the block is left."""
        self._threads = threads
        self._interrupted = interrupted
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="shardkit-commit")
        self._pending: Set[Future] = set()
        self._stopping = threading.Event()
        self._sync_folder = SharedFolderSync()      # every shard goes to the same shards/

    def __enter__(self) -> "CommitPipeline":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None and not issubclass(exc_type, Exception):
            self._stopping.set()
        self._pool.shutdown(wait=True)

    def submit(self, written: WrittenShard) -> List[ShardResult]:
        """Start committing `written`; the results of commits done by now (waits while `threads`
        commits are already under way)."""
        self._pending.add(self._pool.submit(written.commit, self._cancelled, self._sync_folder))
        done = self._collect(block=len(self._pending) >= self._threads)
        return done

    def poll(self) -> List[ShardResult]:
        """The results of commits done by now, without waiting."""
        return self._collect(block=False) if self._pending else []

    def _cancelled(self) -> bool:
        return self._stopping.is_set() or self._interrupted()

    def finish(self) -> List[ShardResult]:
        """Wait for every commit; their results."""
        results: List[ShardResult] = []
        while self._pending:
            results.extend(self._collect(block=True))
        return results

    def _collect(self, block: bool) -> List[ShardResult]:
        finished, self._pending = wait(self._pending, timeout=None if block else 0, return_when=FIRST_COMPLETED)
        return [result for result in (future.result() for future in finished) if result is not None]
