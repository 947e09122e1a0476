"""stop_pool ends a pool's workers at once and leaves nothing for the interpreter's exit hook to
wake: that hook writing to a manager thread's closed wake-up pipe printed a traceback after Ctrl-C."""
from __future__ import annotations

import concurrent.futures.process as pool_module
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor

from shardkit.runtime.workers import stop_pool


def test_a_stopped_pool_leaves_its_manager_out_of_the_exit_hook() -> None:
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    running = [pool.submit(time.sleep, 60) for _ in range(2)]
    manager = pool._executor_manager_thread
    assert manager is not None and manager in pool_module._threads_wakeups
    started = time.monotonic()
    exit_codes = stop_pool(pool)
    assert time.monotonic() - started < 30          # it did not wait for the sleeps
    assert len(exit_codes) == 2 and all(code is not None and code != 0 for code in exit_codes)
    assert manager not in pool_module._threads_wakeups
    assert all(future.done() for future in running)
