"""pull from a local HTTP server that misbehaves: dropped connections, 5xx, slow and stalled answers,
truncated and altered objects, a kill -9 mid-pull. Nothing partial is ever kept under a final name,
every failure is one line naming the object's URL, and a rerun fetches only what is missing."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shardkit

from .conftest import files_of
from .servers import FaultyFolderServer

SHARD = "ds/shards/shard-00003.h5"


def _no_temporaries(dst: Path) -> bool:
    return not [path for path in dst.rglob("*") if ".tmp-" in path.name]


@pytest.mark.parametrize("fault", ["drop", "500", "503", "slow", "truncate", "alter"])
def test_a_passing_fault_is_retried(served: FaultyFolderServer, tmp_path: Path, table50: Path, fault: str) -> None:
    served.fail(SHARD, fault, times=2)
    shardkit.pull(f"{served.url}/ds", str(tmp_path / "dst"))
    assert served.gets[SHARD] == (1 if fault == "slow" else 3)
    assert files_of(tmp_path / "dst") == files_of(table50)


@pytest.mark.parametrize("fault, says", [
    ("alter", "sha256 differs from the manifest"),
    ("truncate", "received 6204 bytes, the manifest says 12408"),
    ("extend", "more than the 12408 bytes the manifest says arrived"),
    ("500", "Internal Server Error"),
    ("404", "no such object"),
])
def test_a_lasting_fault_ends_in_one_line_and_a_rerun_fetches_only_what_is_missing(
        served: FaultyFolderServer, tmp_path: Path, table50: Path, fault: str, says: str) -> None:
    """Mutations: a shard renamed into place before its check; a rerun that fetches shards already in place."""
    served.fail(SHARD, fault, times=None)
    dst = tmp_path / "dst"
    with pytest.raises(shardkit.RemoteError) as raised:
        shardkit.pull(f"{served.url}/ds", str(dst), in_flight=2)
    message = str(raised.value)
    assert message.startswith(f"{served.url}/{SHARD}: cannot fetch: ") and says in message, message
    assert "\n" not in message
    assert not (dst / "manifest.json").exists() and not (dst / "shards" / "shard-00003.h5").exists()
    assert _no_temporaries(dst)
    present = {f"ds/shards/{path.name}" for path in (dst / "shards").iterdir()}
    assert len(present) >= 3
    before = dict(served.gets)
    served.heal()
    report = shardkit.pull(f"{served.url}/ds", str(dst))
    fetched_again = {rel for rel, count in served.gets.items() if count > before.get(rel, 0)}
    assert not present & fetched_again
    assert (report.reused, report.fetched) == (len(present), 50 - len(present))
    assert files_of(dst) == files_of(table50)


def test_a_stalled_server_ends_in_an_error_not_a_hang(served: FaultyFolderServer, tmp_path: Path) -> None:
    import aiohttp
    served.fail(SHARD, "stall", times=None)
    options = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_read=0.5)}}
    started = time.monotonic()
    with pytest.raises(shardkit.RemoteError, match=f"{SHARD}: cannot fetch: .*tried 4 times"):
        shardkit.pull(f"{served.url}/ds", str(tmp_path / "dst"), storage_options=options)
    assert time.monotonic() - started < 15      # four reads of 0.5 s, not the server's 20 s stall each


def test_a_pull_killed_mid_shard_leaves_nothing_that_looks_complete(
        served: FaultyFolderServer, tmp_path: Path, table50: Path) -> None:
    """kill -9 while a shard is half written: no final name holds part of a file, and a rerun ends
    with the whole dataset. Mutation: download straight to the final name."""
    served.fail(SHARD, "stall", times=1)
    dst = tmp_path / "dst"
    code = f"import shardkit; shardkit.pull({served.url + '/ds'!r}, {str(dst)!r}, in_flight=1)"
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "SHARDKIT_RETRY_DELAY": "0.01"})
    try:
        deadline = time.monotonic() + 60
        while served.gets[SHARD] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert served.gets[SHARD] == 1
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert not (dst / "manifest.json").exists()
    for path in (dst / "shards").iterdir():
        if not path.name.startswith("."):
            assert path.read_bytes() == (table50 / "shards" / path.name).read_bytes(), path
    report = shardkit.pull(f"{served.url}/ds", str(dst))
    assert report.reused == 3 and report.fetched == 47
    assert files_of(dst) == files_of(table50)
    assert shardkit.verify(str(dst)).ok


def test_a_server_that_is_down_is_retried_and_named(tmp_path: Path) -> None:
    """fsspec reports a refused connection as a missing object; it is a network failure, tried
    again and named as such. Mutation: the FileNotFoundError taken at its word."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(shardkit.RemoteError) as raised:
        shardkit.pull(f"http://127.0.0.1:{port}/ds", str(tmp_path / "dst"))
    message = str(raised.value)
    assert message.startswith(f"http://127.0.0.1:{port}/ds/manifest.json: cannot fetch: ClientConnectorError")
    assert message.endswith("(tried 4 times)") and not (tmp_path / "dst").exists()
