"""Checked transfers of single objects and a bounded pool to run many at once.

A download goes to a temporary name next to its final one, is checked against the manifest (size,
sha256), fsynced and only then renamed into place: nothing partial ever carries a final name. An
upload hashes the local file first, so a shard damaged since it was verified is never sent."""
from __future__ import annotations

import os
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Iterable, List, Optional, Tuple, TypeVar

from ..errors import CorruptShardError
from ..integrity import FolderSync, create_new, fsync_path, hash_file, hash_shard_file, temp_path
from ..manifest import MANIFEST_NAME, Manifest, parse_manifest
from .location import RemoteLocation
from .retry import Mismatch, fetch_bytes, retried

T = TypeVar("T")
R = TypeVar("R")

#: Transfers in flight at once by default: enough to hide a store's latency per object.
DEFAULT_IN_FLIGHT = 8
#: A manifest larger than this is refused before it is read (a million shards take about 200 MB).
MANIFEST_LIMIT = 1 << 30


def fetch_manifest(location: RemoteLocation) -> Tuple[bytes, Manifest]:
    """The bytes of the manifest at the location and the manifest, checked as a local one is
    (its own checksum, safe shard paths, contiguous indices)."""
    text = fetch_bytes(location, MANIFEST_NAME, MANIFEST_LIMIT)
    return text, parse_manifest(text, location.name(MANIFEST_NAME))


def run_bounded(function: Callable[[T], R], items: Iterable[T], in_flight: Optional[int] = None,
                on_done: Optional[Callable[[T, R], None]] = None) -> List[R]:
    """function(item) for every item, at most in_flight at once, results in item order. The first
    error stops what has not started yet and is raised once the running calls have ended."""
    items = list(items)
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=max(1, in_flight or DEFAULT_IN_FLIGHT),
                            thread_name_prefix="shardkit-transfer") as pool:
        futures = [pool.submit(function, item) for item in items]
        numbers = {future: number for number, future in enumerate(futures)}
        pending: Any = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in done:
                    if future.exception() is not None:
                        raise _first_error(futures)
                    if on_done is not None:
                        on_done(items[numbers[future]], future.result())
        finally:
            for future in futures:
                future.cancel()
        return [future.result() for future in futures]


def _first_error(futures: List["Future[Any]"]) -> BaseException:
    """The error of the earliest item that failed (in item order, not in time): the same for any timing."""
    wait(futures)
    for future in futures:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            return error
    return RuntimeError("a transfer failed")


def download_checked(location: RemoteLocation, rel: str, final: Path, size: int, sha256: str,
                     folder_sync: FolderSync = fsync_path) -> None:
    """Fetch the object at rel into final, once its size and sha256 equal the manifest's; retried.
    A failure leaves nothing at final and no temporary file."""
    tmp = temp_path(final)
    try:
        os.close(create_new(tmp))       # made here (never through a link); the store's client writes into it
        fetch_into(location, rel, tmp, size, sha256)
        os.replace(tmp, final)
        folder_sync(final.parent)
    finally:
        _remove(tmp)


def fetch_into(location: RemoteLocation, rel: str, tmp: Path, size: int, sha256: str) -> None:
    """Fill the existing file tmp with the object at rel, retried until its size and sha256 equal
    the manifest's, and fsync it; RemoteError if it never does (tmp then holds no good copy)."""
    retried(location, rel, "fetch", lambda: _fetch_once(location, rel, tmp, size, sha256))
    fsync_path(tmp)


def _fetch_once(location: RemoteLocation, rel: str, tmp: Path, size: int, sha256: str) -> None:
    """One try: the object written over tmp's content, then its size and hash checked."""
    location.fs.get_file(location.path(rel), str(tmp), callback=size_guard(size))
    received = os.stat(tmp).st_size
    if received != size:
        raise Mismatch(f"received {received} bytes, the manifest says {size}")
    if hash_file(tmp) != sha256:
        raise Mismatch("its sha256 differs from the manifest's (the object was altered or damaged on the way)")


def size_guard(size: int) -> Any:
    """An fsspec callback that stops a download as soon as more bytes than expected arrived (a
    server cannot fill the disk); a short one is caught by the size check after it."""
    from fsspec.callbacks import Callback

    class SizeGuard(Callback):  # type: ignore[misc]
        def relative_update(self, inc: int = 1) -> None:
            self.value += inc
            if self.value > size:
                raise Mismatch(f"more than the {size} bytes the manifest says arrived")

    return SizeGuard()


def upload_checked(location: RemoteLocation, local: Path, root: Path, rel: str, size: int, sha256: str) -> None:
    """Send local (a regular file inside root, hashed first) to rel, then check the object's size."""
    if hash_shard_file(local, root, size) != sha256:
        raise CorruptShardError("changed since it was verified: its sha256 differs from the manifest; "
                                "nothing more was pushed", path=str(local))

    def put() -> None:
        location.fs.put_file(str(local), location.path(rel))
        stored = location.fs.size(location.path(rel))
        if stored != size:
            raise Mismatch(f"the store holds {stored} bytes after the upload, not {size}")
    retried(location, rel, "upload", put)


def upload_bytes(location: RemoteLocation, rel: str, data: bytes) -> None:
    """Write a small object (the manifest) in one request, retried."""
    retried(location, rel, "upload", lambda: location.fs.pipe_file(location.path(rel), data))


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
