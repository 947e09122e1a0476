"""stop_pool ends a pool's busy workers without waiting for their tasks, and leaves nothing for the
interpreter's exit hook to wake: that hook writing to a manager thread's closed wake-up pipe
printed a traceback after Ctrl-C.

The tasks are held at a fixed point: each says it is running, then waits on an event the test
never sets, so stop_pool meets two workers busy for good, on any machine."""
from __future__ import annotations

import concurrent.futures.process as pool_module
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any, List

from shardkit.runtime.workers import stop_pool

_RUNNING: Any = None
_NEVER: Any = None


def _hold(running: Any, never: Any) -> None:
    global _RUNNING, _NEVER
    _RUNNING, _NEVER = running, never


def _busy_for_good(_: int) -> None:
    _RUNNING.put(1)
    _NEVER.wait()


def test_a_stopped_pool_ends_its_busy_workers_and_leaves_the_exit_hook() -> None:
    context = multiprocessing.get_context("spawn")
    running, never = context.Queue(), context.Event()
    pool = ProcessPoolExecutor(2, mp_context=context, initializer=_hold, initargs=(running, never))
    tasks = [pool.submit(_busy_for_good, number) for number in range(2)]
    for _ in tasks:
        running.get(timeout=300)            # both workers are inside a task that never ends by itself
    # The exit hook's list of managers to wake (CPython's concurrent.futures.process): the one
    # place the guarantee shows, so the test reads it.
    manager = pool._executor_manager_thread
    assert manager in pool_module._threads_wakeups
    codes: List[Any] = []
    stopper = threading.Thread(target=lambda: codes.extend(stop_pool(pool)))
    stopper.start()
    stopper.join(300)                       # a bound on a broken stop_pool, not a timing
    assert not stopper.is_alive(), "stop_pool waited for tasks that never end"
    assert len(codes) == 2 and all(code is not None and code != 0 for code in codes)
    assert all(task.done() for task in tasks)
    assert manager not in pool_module._threads_wakeups
