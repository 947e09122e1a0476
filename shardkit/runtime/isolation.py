"""Calls that a crafted file can crash (a C library dying of SIGBUS or SIGSEGV) run in child
processes, so the caller survives, sees the signal and reports the file.

Each child is long-lived (one start per worker, not per call) and replaced after one dies; a
context shared by every call (a dataset's manifest) is sent to each child once, not per call.
A child is a fresh interpreter given the caller's sys.path; unlike a multiprocessing spawn it
does not import the caller's main script (a training script importing torch would cost each
child more than a second, and an unguarded one would run again). What comes back from a child,
which has just read untrusted bytes, is JSON, never a pickle.
"""
from __future__ import annotations

import json
import queue
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, Callable, List, Optional, Sequence

#: Seconds a child gets to exit after its pipe closes before it is killed.
STOP_GRACE = 5.0


class ChildFailed(RuntimeError):
    """The function raised in the child: its exception's type name and message."""


class ChildKilled(Exception):
    """The child process died (killed by a signal, or exited) while running one call."""

    def __init__(self, exitcode: Optional[int]) -> None:
        self.exitcode = exitcode
        super().__init__(describe_exit(exitcode))


def describe_exit(code: Optional[int]) -> str:
    """'killed by SIGBUS' for a negative exit code, else 'exited with status N'."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def _serve(conn: Any, context: Any) -> None:
    """The child's loop: (function, item) in, JSON [true, function(context, item)] or
    [false, "Type: message"] out."""
    while True:
        try:
            function, item = conn.recv()
        except EOFError:
            return
        try:
            outcome = [True, function(context, item)]
        except BaseException as exc:  # noqa: BLE001 - handed back, the caller raises ChildFailed
            outcome = [False, f"{type(exc).__name__}: {exc}"]
        conn.send_bytes(json.dumps(outcome).encode())


def child_main(fd: int) -> None:
    """A child's whole life: the context, then _serve, over the socket at fd."""
    conn = Connection(fd)
    try:
        context = conn.recv()
    except EOFError:
        return
    _serve(conn, context)


#: What a child runs: the caller's sys.path (argv[1], JSON), then child_main on fd argv[2].
_CHILD = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
          "from shardkit.runtime.isolation import child_main; child_main(int(sys.argv[2]))")


class IsolatedCalls:
    """function(context, item) in one child process; after the child dies, the next call starts
    a new one."""

    def __init__(self, context: Any = None) -> None:
        self._context = context
        self._process: Optional[subprocess.Popen] = None
        self._conn: Any = None

    def _start(self) -> None:
        """A fresh interpreter (never a fork: see workers.run_in_workers) with one end of a socket
        pair, sent the context first."""
        ours, theirs = socket.socketpair()
        with theirs:
            fd = theirs.fileno()
            self._process = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(sys.path), str(fd)],
                                             pass_fds=(fd,), stdin=subprocess.DEVNULL)
        self._conn = Connection(ours.detach())
        self._conn.send(self._context)

    def call(self, function: Callable[[Any, Any], Any], item: Any) -> Any:
        """function(context, item)'s JSON-able result; ChildFailed for its exception, ChildKilled
        when the child died running it."""
        try:
            if self._process is None:
                self._start()
            self._conn.send((function, item))
            ok, value = json.loads(self._conn.recv_bytes())
        except (EOFError, OSError):     # the child died, or could not be started (then no exit status)
            process, self._process = self._process, None
            if self._conn is not None:
                self._conn.close()
            raise ChildKilled(None if process is None else process.wait()) from None
        if not ok:
            raise ChildFailed(value)
        return value

    def close(self) -> None:
        """End the child (its loop ends when the socket closes)."""
        if self._process is None:
            return
        process, self._process = self._process, None
        self._conn.close()
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> "IsolatedCalls":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_isolated(function: Callable[[Any, Any], Any], items: Sequence[Any], workers: int,
                 on_done: Callable[[int, Any], None], on_killed: Callable[[Any, ChildKilled], Any],
                 context: Any = None) -> None:
    """function(context, item) for every item in up to `workers` children; on_done(index,
    result) in the calling thread as each ends, with on_killed(item, error)'s value as the result
    of an item whose child died. An exception from function stops the run and propagates."""
    todo: "queue.Queue[int]" = queue.Queue()
    for index in range(len(items)):
        todo.put(index)
    results: "queue.Queue[Any]" = queue.Queue()
    stop = threading.Event()

    def work() -> None:
        with IsolatedCalls(context) as calls:
            while not stop.is_set():
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results.put((index, True, calls.call(function, items[index])))
                except ChildKilled as exc:
                    results.put((index, True, on_killed(items[index], exc)))
                except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                    results.put((index, False, exc))
                    return

    threads: List[threading.Thread] = [threading.Thread(target=work, daemon=True)
                                       for _ in range(max(1, min(workers, len(items))))]
    for thread in threads:
        thread.start()
    try:
        for _ in range(len(items)):
            index, ok, value = results.get()
            if not ok:
                raise value
            on_done(index, value)
    finally:
        stop.set()
        for thread in threads:
            thread.join()


__all__ = ["ChildFailed", "ChildKilled", "IsolatedCalls", "child_main", "describe_exit", "run_isolated"]
