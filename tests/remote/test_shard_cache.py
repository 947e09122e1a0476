"""RemoteShardCache against a local HTTP server: checked copies, one download per shard for all the
processes of a machine, eviction under the limit that never touches a shard in use, and no hang
or half file after a downloader is killed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Tuple

import pytest

import shardkit
from shardkit.manifest import Manifest, load_manifest
from shardkit.remote.cache import RemoteShardCache

from .conftest import disk_use
from .servers import FaultyFolderServer

CHILD = """
import os, sys, time
from shardkit.manifest import Manifest, load_manifest
from shardkit.remote.cache import RemoteShardCache
url, cache_dir, limit, local, start, order, hold = sys.argv[1:8]
cache = RemoteShardCache(url, cache_dir, int(limit), load_manifest(local))
while not os.path.exists(start):
    time.sleep(0.01)
for shard in map(int, order.split(",")):
    cache.local_path(shard)
    if hold == "release":
        cache.release(shard)
print("done", flush=True)
if hold == "hold":
    sys.stdin.read()        # keeps its pins until the test closes stdin
"""


def _child(served: FaultyFolderServer, cache_dir: Path, limit: int, table50: Path, start: Path, order: List[int],
           hold: str = "release") -> "subprocess.Popen[str]":
    args = [served.url + "/ds", str(cache_dir), str(limit), str(table50), str(start), ",".join(map(str, order)), hold]
    return subprocess.Popen([sys.executable, "-c", CHILD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "SHARDKIT_RETRY_DELAY": "0.01"})


def _stalled_download(served: FaultyFolderServer, table50: Path, tmp_path: Path, shard: int) -> Tuple[
        Manifest, str, Path, "subprocess.Popen[str]"]:
    """A child process whose download of the shard into tmp_path/cache stalls half way (returned
    once its request is in): the manifest, the shard's path on the server, the cache, the child."""
    manifest = load_manifest(str(table50))
    rel = f"ds/{manifest.shards.paths[shard]}"
    served.fail(rel, "stall", times=1)
    start = tmp_path / "start"
    start.touch()
    child = _child(served, tmp_path / "cache", 10 ** 9, table50, start, [shard], hold="hold")
    deadline = time.monotonic() + 60
    while served.gets[rel] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    return manifest, rel, tmp_path / "cache", child


def test_a_limit_below_one_shard_is_refused_when_the_cache_is_made(served: FaultyFolderServer, table50: Path,
                                                                   tmp_path: Path) -> None:
    manifest = load_manifest(str(table50))
    largest = int(manifest.shards.sizes.max())
    with pytest.raises(shardkit.UsageError, match=f"below the largest shard .*{largest} bytes"):
        RemoteShardCache(served.url + "/ds", str(tmp_path / "cache"), largest - 1, manifest)
    assert RemoteShardCache(served.url + "/ds", str(tmp_path / "cache"), "10GB", manifest).limit == 10 ** 10
    assert served.gets == {}


def test_an_epoch_in_order_under_a_two_shard_limit(served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    """50 shards through a cache of 2: every shard is its file's bytes, and the folder never holds
    more than the limit plus the shard being read. Mutations: no eviction; eviction of pinned shards."""
    manifest = load_manifest(str(table50))
    sizes = manifest.shards.sizes
    limit = int(sizes[:2].sum())
    cache_dir = tmp_path / "cache"
    with RemoteShardCache(served.url + "/ds", str(cache_dir), limit, manifest) as cache:
        for shard in range(50):
            cache.prefetch([shard + 1, shard + 2][:max(0, 49 - shard)])
            path = cache.local_path(shard)
            assert Path(path).read_bytes() == (table50 / manifest.shards.paths[shard]).read_bytes()
            assert disk_use(cache_dir) <= limit + int(sizes[shard]), shard
            cache.release(shard)
        assert cache.usage() <= limit
    assert set(served.gets) == {f"ds/{path}" for path in manifest.shards.paths}


def test_a_read_past_the_limit_while_every_shard_is_pinned_gives_the_room_back_on_release(
        served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    """A cache of the largest shard's size: a second shard read while the first is pinned takes the
    folder past the limit, and its release brings it back under. Mutation: no trim on release."""
    manifest = load_manifest(str(table50))
    sizes = manifest.shards.sizes
    limit = int(sizes.max())
    with RemoteShardCache(served.url + "/ds", str(tmp_path / "cache"), limit, manifest) as cache:
        cache.local_path(0)
        cache.local_path(1)
        assert cache.usage() == int(sizes[0] + sizes[1]) > limit
        cache.release(1)
        assert cache.usage() == int(sizes[0]) <= limit
        cache.release(0)
        assert Path(cache.shard_path(0)).is_file() and cache.usage() <= limit


def test_processes_sharing_a_cache_download_each_shard_once(served: FaultyFolderServer, table50: Path,
                                                            tmp_path: Path) -> None:
    """Four processes ask for every shard at once, in different orders. Mutation: no fetch lock."""
    served.delay = 0.02
    start = tmp_path / "start"
    orders = [list(range(20)), list(range(19, -1, -1)), list(range(0, 20, 2)) + list(range(1, 20, 2)),
              list(range(20))]
    children = [_child(served, tmp_path / "cache", 10 ** 9, table50, start, order) for order in orders]
    start.touch()
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert out.strip() == "done"
    assert sorted(served.gets.values()) == [1] * 20


def test_a_shard_pinned_by_another_process_is_never_evicted(served: FaultyFolderServer, table50: Path,
                                                            tmp_path: Path) -> None:
    manifest = load_manifest(str(table50))
    limit = int(manifest.shards.sizes[:2].sum())
    start = tmp_path / "start"
    start.touch()
    holder = _child(served, tmp_path / "cache", limit, table50, start, [0], hold="hold")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "done"
        pinned = RemoteShardCache(served.url + "/ds", str(tmp_path / "cache"), limit, manifest).local_path(0)
        with RemoteShardCache(served.url + "/ds", str(tmp_path / "cache"), limit, manifest) as cache:
            for shard in range(1, 10):
                cache.local_path(shard)
                cache.release(shard)
                assert Path(pinned).is_file(), shard
        assert served.gets[f"ds/{manifest.shards.paths[0]}"] == 1
    finally:
        holder.communicate(timeout=30)


def test_a_killed_downloader_neither_blocks_others_nor_leaves_a_file_taken_for_complete(
        served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    """kill -9 mid-download: the process waiting for it takes over and gets the checked file.
    Mutations: download straight to the object's name; a waiter that never takes over."""
    manifest, rel, cache_dir, killed = _stalled_download(served, table50, tmp_path, 7)
    got: List[str] = []
    cache = RemoteShardCache(served.url + "/ds", str(cache_dir), 10 ** 9, manifest)
    assert cache.location.fs is not None        # its client is ready: a GET of its own would go out at once
    waiter = threading.Thread(target=lambda: got.append(cache.local_path(7)))
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive() and served.gets[rel] == 1     # it waits for the download under way
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    waiter.join(60)
    assert not waiter.is_alive() and served.gets[rel] == 2
    assert Path(got[0]).read_bytes() == (table50 / manifest.shards.paths[7]).read_bytes()
    assert [path.name for path in cache_dir.rglob("*.tmp-*")] == []


def test_a_killed_download_is_not_taken_for_complete_by_a_later_run(
        served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    """Mutation: a dead download's temporary file counted as cache content."""
    manifest, rel, cache_dir, killed = _stalled_download(served, table50, tmp_path, 3)
    time.sleep(0.2)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert list(cache_dir.rglob("*.tmp-*"))       # the download's leftover, under a temporary name
    with RemoteShardCache(served.url + "/ds", str(cache_dir), 10 ** 9, manifest) as cache:
        assert cache.usage() == 0           # the dead download's leftovers are neither counted nor kept
        path = cache.local_path(3)
        assert Path(path).read_bytes() == (table50 / manifest.shards.paths[3]).read_bytes()
    assert served.gets[rel] == 2


def test_a_damaged_object_never_enters_the_cache(served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    manifest = load_manifest(str(table50))
    rel = f"ds/{manifest.shards.paths[5]}"
    served.fail(rel, "alter", times=None)
    with RemoteShardCache(served.url + "/ds", str(tmp_path / "cache"), 10 ** 9, manifest) as cache:
        with pytest.raises(shardkit.RemoteError) as raised:
            cache.local_path(5)
        assert str(raised.value).startswith(f"{served.url}/{rel}: cannot fetch: its sha256 differs")
        assert cache.usage() == 0
    assert disk_use(tmp_path / "cache") == 0


def test_prefetch_fetches_in_the_background(served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    manifest = load_manifest(str(table50))
    with RemoteShardCache(served.url + "/ds", str(tmp_path / "cache"), 10 ** 9, manifest) as cache:
        cache.prefetch([0, 1, 2])
        wanted = int(manifest.shards.sizes[:3].sum())
        deadline = time.monotonic() + 60
        while cache.usage() < wanted and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        before = dict(served.gets)
        for shard in range(3):
            cache.local_path(shard)
        assert served.gets == before and len(before) == 3
