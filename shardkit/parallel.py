"""Shard writing in worker processes that stop when the conversion stops (see workers.py).

A stopped worker leaves at most its shard's temporary file, which the caller removes.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, List, Optional

from .errors import ConversionError
from .plan import ShardTask
from .sink import ShardResult, SinkContext, write_shard
from .workers import run_in_workers

_WORKER_CTX: Optional[SinkContext] = None
_WORKER_COUNTERS: Any = None


def _init_worker(ctx: SinkContext, counters: Any) -> None:
    global _WORKER_CTX, _WORKER_COUNTERS
    _WORKER_CTX, _WORKER_COUNTERS = ctx, counters


def _count_in_worker(items: int, nbytes: int) -> None:
    with _WORKER_COUNTERS.get_lock():
        _WORKER_COUNTERS[0] += items
        _WORKER_COUNTERS[1] += nbytes


def _write_in_worker(task: ShardTask) -> ShardResult:
    if _WORKER_CTX is None:
        raise RuntimeError("worker used before its initializer ran")
    return write_shard(_WORKER_CTX, task, progress=_count_in_worker)


def run_parallel(ctx: SinkContext, tasks: List[ShardTask], workers: int,
                 on_result: Callable[[ShardResult], None], on_progress: Callable[[int, int], None]) -> None:
    """Write tasks in `workers` spawned processes, calling on_result in the parent as each ends
    and on_progress between waits (where a Ctrl-C should be raised).

    Any exception (from a shard, from on_result or on_progress) stops every worker before it
    propagates; a worker that dies abruptly becomes a ConversionError.
    """
    counters = multiprocessing.get_context("spawn").Array("q", 2)
    try:
        run_in_workers(_write_in_worker, tasks, workers, on_done=lambda _, result: on_result(result),
                       poll=lambda: on_progress(counters[0], counters[1]),
                       initializer=_init_worker, initargs=(ctx, counters))
    except BrokenProcessPool:
        raise ConversionError("a worker process died unexpectedly (out of memory, or killed); "
                              "finished shards are kept — run the same command with --resume",
                              path=ctx.dst) from None
