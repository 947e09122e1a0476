"""RemoteShardCache: the local copies of a remote dataset's shards that reads go through.

A shard is fetched on its first use, checked (size and sha256 against the manifest) before it
gets its name in the cache, shared by every process of the machine that uses the same cache
folder (one download per shard, whichever process asks first), prefetched in the background on
request, and evicted least recently used first to stay under the limit, never while a process
reads it (cache_folder.py has the layout and the locks)."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple, Union

from ..errors import UsageError
from ..integrity import fsync_path
from ..manifest import Manifest
from ..units import format_size, parse_size
from .cache_folder import CacheFolder, discard, object_name
from .location import RemoteLocation
from .transfer import fetch_into, fetch_manifest

#: Shards waiting to be prefetched at most; further requests are dropped until some are done.
PREFETCH_QUEUE = 8
#: Downloads a cache's prefetching runs at once.
PREFETCH_THREADS = 2


class RemoteShardCache:
    """Local, checked copies of the shards of the dataset at url, in cache_dir, under cache_limit
    bytes ("10GB" accepted) plus the shards being read. local_path(shard) gives a shard's file and
    pins it for this process until release(shard) (or close()); prefetch(shards) fetches ahead;
    table_path() and release_table() do for the sample table what the first two do for a shard.
    A limit below the largest shard is refused here, since no shard could be kept."""

    def __init__(self, url: str, cache_dir: str, cache_limit: Union[int, str], manifest: Manifest, *,
                 storage_options: Optional[Mapping[str, Any]] = None) -> None:
        self.url, self.cache_dir, self.manifest = url, os.fspath(cache_dir), manifest
        self.storage_options = dict(storage_options or {})
        self.location = RemoteLocation(url, self.storage_options)
        self.limit = parse_size(cache_limit)
        largest = int(manifest.shards.sizes.max()) if len(manifest.shards) else 0
        if self.limit < largest:
            raise UsageError(f"cache_limit {format_size(self.limit)} is below the largest shard of "
                             f"{self.location.shown} ({format_size(largest)}, {largest} bytes): no shard could be "
                             "cached; give at least that, better a few shards' worth", path=self.cache_dir)
        self.folder = CacheFolder(self.cache_dir)
        self._reset()

    @classmethod
    def at(cls, url: str, cache_dir: str, cache_limit: Union[int, str, None] = None, *,
           storage_options: Optional[Mapping[str, Any]] = None) -> "RemoteShardCache":
        """The cache of the dataset at url, its manifest fetched and checked first; cache_limit
        None: room for the whole dataset (each shard is fetched once)."""
        _, manifest = fetch_manifest(RemoteLocation(url, storage_options))
        if cache_limit is None:
            tables = [manifest.sample_table] if manifest.fields is None else \
                list(manifest.fields.sample_tables.values())
            cache_limit = int(manifest.shards.sizes.sum()) + sum(int(table["size"]) for table in tables if table)
        return cls(url, cache_dir, cache_limit, manifest, storage_options=storage_options)

    def for_manifest(self, manifest: Manifest) -> "RemoteShardCache":
        """A cache of the same folder, limit and store for the files that `manifest` lists (one
        column of a dataset of named fields: each column's files are a dataset of their own, and
        all share one folder, so one limit bounds them together)."""
        return RemoteShardCache(self.url, self.cache_dir, self.limit, manifest, storage_options=self.storage_options)

    def _reset(self) -> None:
        """The per-process state: pins, the prefetch pool, the lock guarding them."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pins: Dict[str, List[int]] = {}       # object name -> [pin descriptor, uses]
        self._queued: Set[int] = set()              # shards waiting for or in a prefetch
        self._ahead: Set[int] = set()               # shards of the latest prefetch not asked for since
        self._past_limit = False                    # a read of this process took the folder past the limit
        self._pool: Optional[ThreadPoolExecutor] = None

    def _this_process(self) -> None:
        """After a fork: drop the parent's pins and pool (the parent's own descriptors keep its pins)."""
        if self._pid != os.getpid():
            for fd, _ in self._pins.values():
                os.close(fd)
            self._reset()

    @property
    def objects(self) -> str:
        """The folder every cached file lies in."""
        return str(self.folder.objects)

    def shard_path(self, shard: int) -> str:
        """Where the shard's checked copy lies once fetched (nothing is fetched here)."""
        return str(self.folder.object_path(self._name(shard)))

    def local_path(self, shard: int) -> str:
        """The path of a complete, checked copy of the shard, fetched now if the cache lacks it;
        the shard stays pinned (never evicted) until release(shard). RemoteError if it cannot be fetched."""
        self._this_process()
        with self._lock:
            self._ahead.discard(shard)
        return self._local(self._entry(shard))

    def release(self, shard: int) -> None:
        """End one use of the shard by local_path: unpinned once every use has ended."""
        self._release(self._name(shard))

    def table_path(self) -> str:
        """The sample table's checked copy, fetched and pinned as local_path does for a shard;
        release_table() ends the use. UsageError when the manifest lists no sample table."""
        return self._local(self._table_entry())

    def release_table(self) -> None:
        """End one use of the sample table by table_path."""
        rel, sha256, size = self._table_entry()
        self._release(object_name(sha256, size, rel))

    def _local(self, entry: Tuple[str, str, int]) -> str:
        self._this_process()
        rel, sha256, size = entry
        name = object_name(sha256, size, rel)
        self._pin(name)
        try:
            self._ensure(entry, name, for_read=True)
        except BaseException:
            self._release(name)
            raise
        return str(self.folder.object_path(name))

    def _release(self, name: str) -> None:
        """End one use of the object; once none is left, unpin it and, when a read of this process
        took the folder past its limit (every object was pinned), bring it back under."""
        self._this_process()
        with self._lock:
            held = self._pins.get(name)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del self._pins[name]
            os.close(held[0])
            past, self._past_limit = self._past_limit, False
        if past and not self.folder.trim(self.limit, keep=self._prefetched_names()):
            with self._lock:
                self._past_limit = True         # still past: objects of this process are pinned

    def prefetch(self, shards: Iterable[int]) -> None:
        """Fetch these shards, the ones needed next, in the background (at most PREFETCH_QUEUE
        waiting, PREFETCH_THREADS at once), into room the cache has or can make without evicting
        one of them; a failure is left for the read that needs the shard to report."""
        self._this_process()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="shardkit-prefetch")
            wanted = list(shards)
            self._ahead = set(wanted)
            for shard in wanted:
                name = self._name(shard)
                if shard in self._queued or len(self._queued) >= PREFETCH_QUEUE \
                        or self.folder.complete(name, int(self.manifest.shards.sizes[shard])):
                    continue
                self._queued.add(shard)
                self._pool.submit(self._prefetch_one, shard, name)

    def usage(self) -> int:
        """Bytes the cache folder holds now (downloads under way counted at their full size)."""
        return self.folder.usage()

    def close(self) -> None:
        """Unpin every shard this process holds and stop prefetching (downloads under way finish)."""
        if self._pid != os.getpid():
            self._reset()
            return
        with self._lock:
            pool, self._pool = self._pool, None
            pins, self._pins = self._pins, {}
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        for fd, _ in pins.values():
            os.close(fd)

    def __enter__(self) -> "RemoteShardCache":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __reduce__(self) -> Any:
        """Pickles without pins or threads (DataLoader workers started by spawn rebuild it)."""
        return (_rebuild, (self.url, self.cache_dir, self.limit, self.manifest, self.storage_options))

    def _entry(self, shard: int) -> Tuple[str, str, int]:
        """(path in the dataset, sha256, size) of a shard."""
        shards = self.manifest.shards
        if not 0 <= shard < len(shards):
            raise IndexError(f"shard {shard} is out of range for a dataset of {len(shards)} shards")
        return shards.paths[shard], shards.sha256s[shard], int(shards.sizes[shard])

    def _table_entry(self) -> Tuple[str, str, int]:
        table = self.manifest.sample_table
        if table is None:
            raise UsageError("the dataset lists no sample table", path=self.location.shown)
        return table["path"], table["sha256"], int(table["size"])

    def _name(self, shard: int) -> str:
        rel, sha256, size = self._entry(shard)
        return object_name(sha256, size, rel)

    def _pin(self, name: str) -> None:
        with self._lock:
            held = self._pins.get(name)
            if held is not None:
                held[1] += 1
                return
        fd = self.folder.pin(name)
        with self._lock:
            held = self._pins.setdefault(name, [fd, 0])
            held[1] += 1
        if held[0] != fd:      # another thread pinned it meanwhile
            os.close(fd)

    def _ensure(self, entry: Tuple[str, str, int], name: str, for_read: bool) -> bool:
        """Make the object complete in the cache (fetching it under its fetch lock); whether it
        is there. A prefetch (for_read=False) gives up when the room cannot be made."""
        rel, sha256, size = entry
        if self.folder.complete(name, size):
            self.folder.touch(name)
            return True
        with self.folder.fetching(name):
            if self.folder.complete(name, size):
                self.folder.touch(name)
                return True
            keep = () if for_read else self._prefetched_names()
            tmp, past = self.folder.reserve(name, size, self.limit, evict=for_read, keep=keep)
            if past and tmp is not None:
                with self._lock:
                    self._past_limit = True     # trimmed when a read of this process ends
            if tmp is None:
                return False
            try:
                fetch_into(self.location, rel, tmp, size, sha256)
                os.replace(tmp, self.folder.object_path(name))
                fsync_path(self.folder.objects)
            finally:
                discard(tmp)
        return True

    def _prefetched_names(self) -> Set[str]:
        """The shards of the latest prefetch not asked for yet: a prefetch never evicts them for another."""
        with self._lock:
            return {self._name(shard) for shard in self._ahead}

    def _prefetch_one(self, shard: int, name: str) -> None:
        try:
            self._ensure(self._entry(shard), name, for_read=False)
        except Exception:
            pass        # the read of this shard fetches it again and reports what fails
        finally:
            with self._lock:
                self._queued.discard(shard)


def _rebuild(url: str, cache_dir: str, limit: int, manifest: Manifest, options: Dict[str, Any]) -> RemoteShardCache:
    return RemoteShardCache(url, cache_dir, limit, manifest, storage_options=options)
