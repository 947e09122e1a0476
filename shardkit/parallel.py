"""Shard writing in worker processes that stop when the conversion stops.

A plain ProcessPoolExecutor finishes every shard it already handed out before an error or a
Ctrl-C can end the run, and its workers outlive a parent killed with SIGKILL. Here:
- workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group); the parent
  decides and stops them with SIGTERM, so an interrupted run ends in well under a second;
- on any error the queued shards are cancelled and the running ones are stopped too;
- on Linux each worker asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG),
  so `kill -9` of the command leaves no writer behind to race a later `--resume`.
A stopped worker leaves at most its shard's temporary file, which the caller removes.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, List, Optional

from .errors import ConversionError
from .plan import ShardTask
from .sink import ShardResult, SinkContext, write_shard

_WORKER_CTX: Optional[SinkContext] = None
_WORKER_COUNTERS: Any = None
#: Seconds a stopped worker gets to exit after SIGTERM before it is killed.
STOP_GRACE = 2.0


def _die_with_parent(parent: int) -> None:
    """Linux: have the kernel SIGKILL this process when its parent dies; exit if it already has."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)   # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _init_worker(ctx: SinkContext, counters: Any, parent: int) -> None:
    global _WORKER_CTX, _WORKER_COUNTERS
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    _WORKER_CTX, _WORKER_COUNTERS = ctx, counters


def _count_in_worker(items: int, nbytes: int) -> None:
    with _WORKER_COUNTERS.get_lock():
        _WORKER_COUNTERS[0] += items
        _WORKER_COUNTERS[1] += nbytes


def _write_in_worker(task: ShardTask) -> ShardResult:
    if _WORKER_CTX is None:
        raise RuntimeError("worker used before its initializer ran")
    return write_shard(_WORKER_CTX, task, progress=_count_in_worker)


class _SigintIgnored:
    """Ignore SIGINT while workers are spawned, so they start with it ignored (inherited)."""

    def __enter__(self) -> "_SigintIgnored":
        self._previous = None
        try:
            self._previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:      # not the main thread: signals are not ours to change
            pass
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def run_parallel(ctx: SinkContext, tasks: List[ShardTask], workers: int,
                 on_result: Callable[[ShardResult], None], on_progress: Callable[[int, int], None]) -> None:
    """Write tasks in `workers` spawned processes, calling on_result in the parent as each ends.

    Any exception (from a shard, from on_result, or KeyboardInterrupt) stops every worker
    before it propagates; a worker that dies abruptly becomes a ConversionError.
    """
    mp = multiprocessing.get_context("spawn")
    counters = mp.Array("q", 2)
    pool = ProcessPoolExecutor(workers, mp_context=mp, initializer=_init_worker,
                               initargs=(ctx, counters, os.getpid()))
    try:
        with _SigintIgnored():
            pending = {pool.submit(_write_in_worker, task) for task in tasks}
        while pending:
            finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            on_progress(counters[0], counters[1])
            for future in finished:
                on_result(future.result())
        on_progress(counters[0], counters[1])
    except BrokenProcessPool:
        stop_pool(pool)
        raise ConversionError(f"{ctx.dst}: a worker process died unexpectedly (out of memory, or killed); "
                              "finished shards are kept — run the same command with --resume",
                              path=ctx.dst) from None
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel queued shards and end running workers now (SIGTERM, then SIGKILL), then reap them."""
    terminate = getattr(pool, "terminate_workers", None)   # Python 3.14+
    if terminate is not None:
        terminate()
        return
    # Before 3.14 the executor has no public way to end its workers: use its process table.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(STOP_GRACE)
        if process.is_alive():
            process.kill()
            process.join()
