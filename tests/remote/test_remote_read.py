"""open_dataset(URL) and ShardStream(URL) against real servers on 127.0.0.1: the samples are the
local copy's, each shard is fetched once per machine and checked before use, the cache stays under
its limit plus the shards being read, a limit below one shard fails at open, and credentials appear
in no message."""
from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import shardkit
from shardkit.manifest import load_manifest

from .conftest import disk_use
from .servers import FaultyFolderServer, S3Server

SECRET = "wJalrXUtnFEMI-remote-read-secret"


def _values(samples: Any) -> List[tuple]:
    """(features, label) pairs as plain tuples, for comparing two reads of a table dataset."""
    return [(tuple(np.asarray(features).tolist()), int(label)) for features, label in samples]


def _largest(root: Path) -> int:
    return int(load_manifest(str(root)).shards.sizes.max())


class DiskWatch:
    """The most bytes seen under a folder, looked at every few milliseconds in a thread."""

    def __init__(self, root: Path) -> None:
        self.root, self.most, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.most = max(self.most, disk_use(self.root))
            except FileNotFoundError:       # a file evicted while the folder was walked
                pass
            time.sleep(0.002)

    def __enter__(self) -> "DiskWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def pushed(s3: S3Server, bucket: str, table50: Path) -> str:
    """table50 pushed to a new bucket: its URL."""
    url = f"s3://{bucket}/ds"
    shardkit.push(str(table50), url, storage_options=s3.options())
    return url


@pytest.mark.parametrize("verify_checksums", [False, True, "full"])
def test_a_dataset_at_a_url_reads_as_its_local_copy(served: FaultyFolderServer, table50: Path, tmp_path: Path,
                                                    verify_checksums: Any) -> None:
    local = shardkit.open_dataset(str(table50))
    with shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache",
                               verify_checksums=verify_checksums) as remote:
        assert isinstance(remote, shardkit.HDF5Dataset) and remote.root == served.url + "/ds"
        assert remote.max_open_shards == local.max_open_shards      # the default limit holds every shard
        assert _values(remote[i] for i in range(len(remote))) == _values(local[i] for i in range(len(local)))
        assert remote.key(7) == local.key(7)
        assert remote.targets().tolist() == local.targets().tolist()
    # every shard and the sample table once; nothing else but the manifest
    assert sorted(set(served.gets.values())) == [1] and len(served.gets) == 50 + 2


def test_a_cache_limit_below_one_shard_fails_at_open(served: FaultyFolderServer, table50: Path,
                                                     tmp_path: Path) -> None:
    largest = _largest(table50)
    for opener in (shardkit.open_dataset, shardkit.ShardStream):
        with pytest.raises(shardkit.UsageError, match=f"cache_limit .* is below the largest shard of "
                                                      f"{served.url}/ds .*{largest} bytes"):
            opener(served.url + "/ds", cache_dir=tmp_path / "cache", cache_limit=largest - 1)
    assert dict(served.gets) == {"ds/manifest.json": 2}        # nothing but the manifests was fetched


def test_remote_options_need_a_url_and_a_url_needs_a_cache_dir(table50: Path, served: FaultyFolderServer,
                                                               tmp_path: Path) -> None:
    with pytest.raises(shardkit.UsageError, match="cache_dir apply to a dataset at a URL"):
        shardkit.open_dataset(str(table50), cache_dir=tmp_path / "cache")
    with pytest.raises(shardkit.UsageError, match="give cache_dir=FOLDER"):
        shardkit.open_dataset(served.url + "/ds")
    assert served.gets == {}


def test_an_epoch_of_fifty_shards_through_a_two_shard_cache_with_two_workers(
        s3: S3Server, pushed: str, table50: Path, tmp_path: Path) -> None:
    """The epoch completes (a DataLoader timeout would fail a stuck one) with every sample once, and
    the cache folder never holds more than the limit plus the shards the workers have open (each
    worker keeps as many open as the limit holds, 2) and the sample table.
    Mutations: no eviction; a cache that evicts pinned shards; no clamp of the open shards."""
    largest = _largest(table50)
    limit = 2 * largest
    stream = shardkit.ShardStream(pushed, cache_dir=tmp_path / "cache", cache_limit=limit,
                                  storage_options=s3.options(), batch_size=8, decode=None)
    assert stream.dataset.max_open_shards == 2
    table = int(stream.dataset.manifest.sample_table["size"])
    with DiskWatch(tmp_path / "cache") as disk:
        got = [(row.tobytes(), int(label)) for features, labels in
               DataLoader(stream, batch_size=8, num_workers=2, timeout=120)
               for row, label in zip(features.numpy(), labels)]
    local = shardkit.open_dataset(str(table50), decode=None)
    expected = [(np.asarray(local[i][0]).tobytes(), local[i][1]) for i in range(len(local))]
    assert sorted(got) == sorted(expected)
    assert 0 < disk.most <= limit + 2 * 2 * largest + table


def test_dataloader_workers_share_one_download_per_shard(served: FaultyFolderServer, table50: Path,
                                                         tmp_path: Path) -> None:
    """Two workers, forked after the main process read shard 0, read batches that touch every
    shard: the server sees one GET per shard. Mutation: a cache folder per process."""
    served.delay = 0.01
    ds = shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache", decode=None)
    assert ds[0][1] == 0            # shard 0 open in the main process: the workers inherit it
    sampler = shardkit.ShardAwareSampler(ds, seed=3)
    loader = DataLoader(ds, batch_size=25, num_workers=2, sampler=sampler, timeout=120)
    labels = torch.cat([batch_labels for _, batch_labels in loader])
    assert sorted(labels.tolist()) == sorted(shardkit.open_dataset(str(table50)).targets().tolist())
    shard_gets = {path: count for path, count in served.gets.items() if "/shards/" in path}
    assert len(shard_gets) == 50 and set(shard_gets.values()) == {1}


def _shards_in_order(ds: Any, order: Any) -> List[int]:
    """The shards of an order of global indices, in the order of their first use."""
    return list(dict.fromkeys((np.searchsorted(ds.shard_starts, order, side="right") - 1).tolist()))


def _wait_for(condition: Any, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return bool(condition())


def test_a_stream_prefetches_the_next_shards_of_its_order(served: FaultyFolderServer, table50: Path,
                                                          tmp_path: Path) -> None:
    """Mutation: no prefetch call in ShardStream."""
    stream = shardkit.ShardStream(served.url + "/ds", cache_dir=tmp_path / "cache", seed=5, shuffle_buffer=1)
    paths = stream.dataset.manifest.shards.paths
    first_shards = _shards_in_order(stream.dataset, stream.epoch_order())[:3]
    assert first_shards != [0, 1, 2]
    next(iter(stream))          # one sample of the first shard read, nothing more asked
    wanted = {f"ds/{paths[shard]}" for shard in first_shards}
    assert _wait_for(lambda: wanted <= set(served.gets))
    assert served.gets[f"ds/{paths[first_shards[0]]}"] == 1


def test_the_sampler_prefetches_the_shards_its_order_reaches_next(served: FaultyFolderServer, table50: Path,
                                                                  tmp_path: Path) -> None:
    """Mutation: ShardAwareSampler.items without prefetching."""
    ds = shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache")
    sampler = shardkit.ShardAwareSampler(ds, seed=1, shards_per_window=1)
    order = list(sampler)
    shards = _shards_in_order(ds, order)
    paths = ds.manifest.shards.paths
    first = next(iter(sampler))
    assert first == order[0]
    wanted = {f"ds/{paths[shard]}" for shard in shards[1:3]}
    assert _wait_for(lambda: wanted <= set(served.gets))


def test_a_damaged_object_fails_the_read_naming_its_url_and_leaves_nothing(
        served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    paths = load_manifest(str(table50)).shards.paths
    served.fail(f"ds/{paths[4]}", "alter", times=None)
    ds = shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache")
    assert ds[0][1] == 0
    with pytest.raises(shardkit.RemoteError) as raised:
        ds[4 * 10 + 3]
    assert str(raised.value).startswith(f"{served.url}/ds/{paths[4]}: cannot fetch: its sha256 differs")
    shard_zero = load_manifest(str(table50)).shards.sha256s[0]
    objects = tmp_path / "cache" / "objects"
    assert [path.name[:64] for path in objects.iterdir() if path.suffix == ".h5"] == [shard_zero]
    assert not list(objects.glob(".*"))
    served.heal()
    assert ds[4 * 10 + 3][1] == shardkit.open_dataset(str(table50))[43][1]


@pytest.mark.parametrize("fault", ["drop", "500", "503", "slow", "truncate", "alter", "extend"])
def test_a_fault_that_passes_is_retried_and_the_read_gets_the_right_samples(
        served: FaultyFolderServer, table50: Path, tmp_path: Path, fault: str) -> None:
    paths = load_manifest(str(table50)).shards.paths
    served.fail(f"ds/{paths[2]}", fault, times=1)
    with shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache") as ds:
        local = shardkit.open_dataset(str(table50))
        assert _values(ds[i] for i in range(20, 30)) == _values(local[i] for i in range(20, 30))
    assert served.gets[f"ds/{paths[2]}"] == (1 if fault == "slow" else 2)     # a slow answer is no failure


@pytest.mark.parametrize("fault, says", [("404", "no such object"), ("503", "ClientResponseError: 503"),
                                         ("truncate", "received"), ("extend", "more than the")])
def test_a_fault_that_stays_is_one_error_naming_the_url(served: FaultyFolderServer, table50: Path,
                                                        tmp_path: Path, fault: str, says: str) -> None:
    paths = load_manifest(str(table50)).shards.paths
    served.fail(f"ds/{paths[2]}", fault, times=None)
    with shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache") as ds:
        with pytest.raises(shardkit.RemoteError) as raised:
            ds[25]
    message = str(raised.value)
    assert message.startswith(f"{served.url}/ds/{paths[2]}: cannot fetch: ") and says in message, message
    assert "\n" not in message
    assert not [path for path in (tmp_path / "cache" / "objects").iterdir() if path.suffix != ".bin"]


def test_a_cached_shard_damaged_on_local_disk_is_caught_with_full_checks(served: FaultyFolderServer, table50: Path,
                                                                         tmp_path: Path) -> None:
    with shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache") as ds:
        ds[0]
    manifest = load_manifest(str(table50))
    cached = next((tmp_path / "cache" / "objects").glob(manifest.shards.sha256s[0] + "-*"))
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    with shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache", verify_checksums="full") as ds:
        with pytest.raises(shardkit.CorruptShardError, match="sha256"):
            ds[0]


def test_credentials_appear_in_no_message_or_log(s3: S3Server, served: FaultyFolderServer, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    host = served.url.split("://", 1)[1]
    paths = load_manifest(str(served.root / "ds")).shards.paths
    served.fail(f"ds/{paths[1]}", "500", times=None)
    ds = shardkit.open_dataset(f"http://reader:{SECRET}@{host}/ds", cache_dir=tmp_path / "cache")
    shown = [repr(ds), ds.root, str(ds.manifest.to_dict())]
    with pytest.raises(shardkit.RemoteError) as raised:
        ds[15]
    shown.append(str(raised.value))
    assert str(raised.value).startswith(f"http://{host}/ds/{paths[1]}: cannot fetch: ClientResponseError: 500")
    options = s3.options(secret=SECRET)
    with pytest.raises(shardkit.RemoteError) as denied:
        shardkit.ShardStream("s3://no-such-bucket-here/ds", cache_dir=tmp_path / "cache", storage_options=options)
    shown.append(str(denied.value))
    assert str(denied.value).startswith("s3://no-such-bucket-here/ds/manifest.json: cannot fetch")
    assert all(SECRET not in text and "reader" not in text for text in shown), shown
    assert not [record for record in caplog.records if SECRET in record.getMessage()]
    assert not list((tmp_path / "cache").rglob(f"*{SECRET}*"))


def test_a_pickled_copy_reads_through_the_same_cache(served: FaultyFolderServer, table50: Path,
                                                     tmp_path: Path) -> None:
    ds = shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache")
    ds[0]
    copy = pickle.loads(pickle.dumps(ds))
    assert _values([copy[11]]) == _values([shardkit.open_dataset(str(table50))[11]])
    assert served.gets[f"ds/{ds.manifest.shards.paths[0]}"] == 1


READER = """
import sys
import shardkit
ds = shardkit.open_dataset(sys.argv[1], cache_dir=sys.argv[2])
print(ds[int(sys.argv[3])][1], flush=True)
"""


def test_a_reader_killed_mid_download_leaves_nothing_a_later_run_takes_for_complete(
        served: FaultyFolderServer, table50: Path, tmp_path: Path) -> None:
    """kill -9 of a process whose shard download stalls half way; a later run fetches the shard
    again and reads it whole. Mutation: the download written straight under the object's name."""
    import signal
    import subprocess
    import sys
    paths = load_manifest(str(table50)).shards.paths
    rel = f"ds/{paths[3]}"
    served.fail(rel, "stall", times=1)
    child = subprocess.Popen([sys.executable, "-c", READER, served.url + "/ds", str(tmp_path / "cache"), "35"],
                             stdout=subprocess.PIPE, text=True)
    assert _wait_for(lambda: served.gets[rel] == 1)
    time.sleep(0.2)             # half the object written
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert list((tmp_path / "cache" / "objects").glob(".*.tmp-*"))       # what it left, under a temporary name
    local = shardkit.open_dataset(str(table50))
    with shardkit.open_dataset(served.url + "/ds", cache_dir=tmp_path / "cache") as ds:
        assert _values(ds[i] for i in range(30, 40)) == _values(local[i] for i in range(30, 40))
    assert served.gets[rel] == 2
    assert not list((tmp_path / "cache" / "objects").glob(".*.tmp-*"))


def test_the_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    """benchmarks/remote_read.py still runs (it times nothing here): both ratios are printed."""
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(repo / "benchmarks" / "remote_read.py"), "--mb", "2", "--shard-size",
                           "256KB", "--repeat", "1", "--stores", "http", "--work", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cached epoch rate / local epoch rate" in done.stdout and "| pull, then read |" in done.stdout
