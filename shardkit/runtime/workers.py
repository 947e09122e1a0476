"""Worker processes that stop when their parent stops (shard writing, CSV scanning).

A plain ProcessPoolExecutor finishes every task it already handed out before an error or a
Ctrl-C can end the run, and its workers outlive a parent killed with SIGKILL. Here:
- workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group); the parent
  decides and stops them with SIGTERM, so an interrupted run ends in well under a second;
- on any error the queued tasks are cancelled and the running ones are stopped too;
- on Linux each worker asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG),
  so `kill -9` of the command leaves no worker behind to race a later `--resume`.
The parent must not be interrupted inside the pool's own waits (they take several locks in a
row): run_in_workers calls `poll` between waits, and that is where a Ctrl-C should be raised
(interrupt.SigintLatch.deferred()).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

#: Environment variable that overrides the default of --workers (e.g. 1 on a shared login node).
WORKERS_ENV = "SHARDKIT_WORKERS"
#: Seconds a stopped worker gets to exit after SIGTERM before it is killed.
STOP_GRACE = 2.0
#: Seconds between the parent's looks at its workers (and at poll()).
POLL_SECONDS = 0.2


def default_workers() -> int:
    """The default --workers: $SHARDKIT_WORKERS when set, else the CPUs this process may run on
    (its affinity mask, which cgroups, taskset and Slurm narrow; not the machine's core count)."""
    text = os.environ.get(WORKERS_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            from ..errors import UsageError
            raise UsageError(f"{WORKERS_ENV} must be a whole number of at least 1, not {text!r}")
        return int(text)
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


#: Exit status of a spawned worker whose import of the main script called shardkit again.
UNGUARDED_MAIN_EXIT = 87


def exit_if_importing_main() -> None:
    """End this process with UNGUARDED_MAIN_EXIT if it is a spawned worker still importing the
    main script (whose top-level code, unguarded by `if __name__ == "__main__":`, called shardkit
    again): run_in_workers then tells the parent what to do, instead of a second conversion (or a
    worker that dies some other way) starting here. Entry points that start workers call this first."""
    # multiprocessing's own test for this moment (spawn._check_not_importing_main)
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise SystemExit(UNGUARDED_MAIN_EXIT)


def _unguarded_main_error() -> Exception:
    from ..errors import UnguardedMainError
    main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main script"
    return UnguardedMainError(f"worker processes could not start: each one imports {main}, which calls shardkit "
                              "again; put the call under `if __name__ == \"__main__\":`, or pass workers=1")


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


def _init(parent: int, initializer: Optional[Callable[..., None]], initargs: Tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)


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


def running_threads() -> Optional[int]:
    """How many threads this process runs, all of them (Python's, OpenMP's, a library's), or None
    where the system does not say (Linux says, in /proc/self/task)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def writer_start_method() -> str:
    """How workers that only write new files start: "fork" on Linux when this process runs one
    thread, since then no lock can be held at the fork by a thread the child lacks (what makes a fork of
    a threaded process deadlock), and a child starts in milliseconds instead of a new interpreter's
    quarter second of imports; "spawn" anywhere else. Workers that read shards the parent may hold
    open (verify's) are always spawned."""
    if sys.platform.startswith("linux") and running_threads() == 1:
        return "fork"
    return "spawn"


def run_in_workers(function: Callable[[Any], Any], items: Sequence[Any], workers: int,
                   on_done: Callable[[int, Any], None], poll: Callable[[], None] = lambda: None,
                   initializer: Optional[Callable[..., None]] = None, initargs: Tuple[Any, ...] = (),
                   start_method: str = "spawn") -> None:
    """function(item) for every item in `workers` processes started by `start_method`
    (writer_start_method() for writers); on_done(index, result) in the parent as each ends, poll()
    between waits. Any exception (from a task, on_done or poll — BrokenProcessPool when a worker
    dies) stops every worker before it propagates."""
    mp = multiprocessing.get_context(start_method)
    pool = ProcessPoolExecutor(max(1, min(workers, len(items))), mp_context=mp, initializer=_init,
                               initargs=(os.getpid(), initializer, initargs))
    try:
        with _SigintIgnored():
            pending: Dict[Future, int] = {pool.submit(function, item): index for index, item in enumerate(items)}
        while pending:
            finished, _ = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            poll()
            for future in finished:
                on_done(pending.pop(future), future.result())
        poll()
    except BaseException as exc:
        exit_codes = stop_pool(pool)
        if isinstance(exc, BrokenProcessPool) and UNGUARDED_MAIN_EXIT in exit_codes:
            raise _unguarded_main_error() from None
        raise
    pool.shutdown(wait=True)


def stop_pool(pool: ProcessPoolExecutor) -> List[Optional[int]]:
    """Cancel queued tasks and end running workers now (SIGTERM, then SIGKILL), then reap them;
    the workers' exit statuses (where the pool still lists them)."""
    # The executor has no public way to end its workers before 3.14, nor to list them: its process table.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)     # shutdown() below forgets it
    terminate = getattr(pool, "terminate_workers", None)   # Python 3.14+
    if terminate is not None:
        terminate()
        return [process.exitcode for process in processes]
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(STOP_GRACE)
        if process.is_alive():
            process.kill()
            process.join()
    # Its manager thread closes a wake-up pipe as it ends, and the interpreter's exit hook writes
    # to that pipe to wake it: after a stop that write has printed a 'Bad file descriptor'
    # traceback (seen with forked workers on a loaded machine). Let the thread end, then take it
    # out of the hook's list: it needs no waking once its workers are gone, and the exit still
    # waits for it to end.
    if manager is not None:
        manager.join(STOP_GRACE)
        import concurrent.futures.process as pool_module
        wakeups = getattr(pool_module, "_threads_wakeups", None)
        if wakeups is not None:
            wakeups.pop(manager, None)
    return [process.exitcode for process in processes]


__all__ = ["POLL_SECONDS", "STOP_GRACE", "UNGUARDED_MAIN_EXIT", "WORKERS_ENV", "default_workers",
           "exit_if_importing_main", "run_in_workers", "running_threads", "stop_pool", "writer_start_method"]
