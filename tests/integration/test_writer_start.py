"""Shard writers are forked where that is safe (Linux, a process running one thread) and spawned
otherwise; either way the shards are the same bytes, and a forked writer never keeps DST locked."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import pytest

from shardkit.errors import LockedError
from shardkit.writing.journal import Journal
from tests.faults.helpers import cli_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork is chosen on Linux only")

#: numpy's OpenBLAS starts no thread pool, as under the shardkit command
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1"}


def _python(code: str, env: Dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=cli_env(env), capture_output=True,
                          text=True, timeout=timeout)


def test_one_thread_forks_and_a_second_thread_makes_it_spawn() -> None:
    done = _python("""
        import threading
        import numpy, PIL.Image, lmdb, h5py
        from shardkit.runtime.workers import running_threads, writer_start_method
        print(running_threads(), writer_start_method())
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        print(running_threads(), writer_start_method())
        stop.set()
        thread.join()
        """, ONE_THREAD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["1 fork", "2 spawn"]


def test_the_command_runs_one_thread_after_importing_what_its_commands_use() -> None:
    done = _python("""
        import shardkit.cli, numpy, PIL.Image, lmdb, h5py
        from shardkit.runtime.workers import running_threads
        print(running_threads())
        """, {})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def _convert_in_child(src: Path, dst: Path, second_thread: bool) -> Dict[str, str]:
    """Each shard's sha256 as the manifest of a 2-worker conversion in a new process records it."""
    done = _python(f"""
        import threading
        import shardkit
        from shardkit.runtime.workers import writer_start_method
        stop = threading.Event()
        if {second_thread!r}:
            threading.Thread(target=stop.wait).start()
        print(writer_start_method())
        shardkit.convert({str(src)!r}, {str(dst)!r}, format="hdf5", samples_per_shard=7, workers=2, quiet=True)
        stop.set()
        """, ONE_THREAD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("spawn" if second_thread else "fork")
    manifest = json.loads((dst / "manifest.json").read_text())
    return {entry["path"]: entry["sha256"] for entry in manifest["shards"]}


def test_forked_and_spawned_writers_write_the_same_shards(tmp_path: Path, image_tree: Path) -> None:
    forked = _convert_in_child(image_tree, tmp_path / "forked", second_thread=False)
    spawned = _convert_in_child(image_tree, tmp_path / "spawned", second_thread=True)
    assert len(forked) > 2
    assert forked == spawned
    for name in forked:
        assert (tmp_path / "forked" / name).read_bytes() == (tmp_path / "spawned" / name).read_bytes()


def test_a_forked_child_does_not_keep_dst_locked_after_its_parent_is_gone(tmp_path: Path) -> None:
    """The parent takes DST's lock, forks a child that lives on, and is killed: the lock must end
    with the parent, or a --resume would be refused as long as a dying writer lingers. The parent
    says "locked" only once the child runs, so the child's fork hooks have run by then (a loaded
    machine may start the child late)."""
    dst = tmp_path / "dst"
    dst.mkdir()
    child_pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        from shardkit.writing.journal import Journal
        journal = Journal({str(dst)!r})
        journal.lock()
        pid = os.fork()
        if pid == 0:        # the fork's hooks have run once the child runs this
            with open({str(child_pid_file)!r} + ".tmp", "w") as handle:
                handle.write(str(os.getpid()))
            os.rename({str(child_pid_file)!r} + ".tmp", {str(child_pid_file)!r})
            time.sleep(60)
            os._exit(0)
        while not os.path.exists({str(child_pid_file)!r}):
            time.sleep(0.01)
        print("locked", flush=True)
        time.sleep(60)
        """)], env=cli_env(), stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "locked"
        child = int(child_pid_file.read_text())
        with pytest.raises(LockedError):        # the parent holds it
            Journal(dst).lock()
        parent.kill()
        parent.wait(timeout=30)
        os.kill(child, 0)                       # the forked child still runs
        journal = Journal(dst)
        journal.lock()                          # LockedError if the child held a copy of the lock
        assert journal.locked
        journal.unlock()
    finally:
        parent.kill()
        parent.wait(timeout=30)
        if child:
            try:
                os.kill(child, 9)
            except ProcessLookupError:
                pass
