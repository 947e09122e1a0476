"""Shard writing in worker processes that stop when the conversion stops (see workers.py).

A stopped worker leaves at most its shard's temporary file, which the caller removes. A Ctrl-C
in a terminal reaches the workers too: from then on a worker commits no shard it has not yet
renamed (its task returns None), so the run stops at once instead of finishing the shards the
workers hold while the parent gets round to stopping them.
"""
from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, List, Optional

from ..errors import ConversionError
from .plan import ShardTask
from .sink import ShardResult, SinkContext, write_shard_file
from ..runtime.workers import run_in_workers, writer_start_method

_WORKER_CTX: Optional[SinkContext] = None
_WORKER_COUNTERS: Any = None
_INTERRUPTED = False


def _init_worker(ctx: SinkContext, counters: Any) -> None:
    global _WORKER_CTX, _WORKER_COUNTERS
    _WORKER_CTX, _WORKER_COUNTERS = ctx, counters
    signal.signal(signal.SIGINT, _note_interrupt)     # noted, never raised: the parent stops the worker


def _note_interrupt(signum: int, frame: Any) -> None:
    global _INTERRUPTED
    _INTERRUPTED = True


def _count_in_worker(items: int, nbytes: int) -> None:
    with _WORKER_COUNTERS.get_lock():
        _WORKER_COUNTERS[0] += items
        _WORKER_COUNTERS[1] += nbytes


def _write_in_worker(task: ShardTask) -> Optional[ShardResult]:
    """The shard's result, or None when a Ctrl-C came before its rename (nothing recorded)."""
    if _WORKER_CTX is None:
        raise RuntimeError("worker used before its initializer ran")
    return write_shard_file(_WORKER_CTX, task, progress=_count_in_worker).commit(lambda: _INTERRUPTED)


def _result_or_interrupt(result: Optional[ShardResult], on_result: Callable[[ShardResult], None]) -> None:
    if result is None:          # the worker saw a Ctrl-C: the run is interrupted
        raise KeyboardInterrupt
    on_result(result)


def run_parallel(ctx: SinkContext, tasks: List[ShardTask], workers: int,
                 on_result: Callable[[ShardResult], None], on_progress: Callable[[int, int], None]) -> None:
    """Write tasks in `workers` processes (forked where that is safe, else spawned), calling
    on_result in the parent as each ends and on_progress between waits (where a Ctrl-C should be raised).

    Any exception (from a shard, from on_result or on_progress) stops every worker before it
    propagates; a worker that dies abruptly becomes a ConversionError.
    """
    start_method = writer_start_method()
    counters = multiprocessing.get_context(start_method).Array("q", 2)
    try:
        run_in_workers(_write_in_worker, tasks, workers,
                       on_done=lambda _, result: _result_or_interrupt(result, on_result),
                       poll=lambda: on_progress(counters[0], counters[1]),
                       initializer=_init_worker, initargs=(ctx, counters), start_method=start_method)
    except BrokenProcessPool:
        raise ConversionError("a worker process died unexpectedly (out of memory, or killed); "
                              "finished shards are kept — run the same command with --resume",
                              path=ctx.dst) from None
