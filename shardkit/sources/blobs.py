"""One input file read by byte ranges, wherever it lies: a local file (pread) or an object in a
store (ranged GETs through remote/retry.py, so a transient failure is tried again and one that
stays ends in one RemoteError naming the URL). Archives are listed and read through this, never
unpacked to disk; BlobStream gives the sequential, buffered view tarfile and zipfile want."""
from __future__ import annotations

import io
import os
from typing import Any, Callable, Mapping, Optional, Tuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ..errors import SampleError, UsageError
from ..remote.location import RemoteLocation, is_url
from ..remote.retry import Mismatch, retried

T = TypeVar("T")

#: Bytes a BlobStream fetches at once: few requests for the headers of a tar of small files.
STREAM_BLOCK = 1 << 20
#: No single read of an archive asks for more (a member, a tar's extended header): a crafted
#: header cannot make a read allocate what it likes.
MAX_READ_BYTES = 256 << 20


class Blob:
    """The bytes of one file: size, read(start, length) (exactly length bytes, or an error), and
    checked(rel, action, call), which runs a read-and-check once locally and retried remotely."""

    size: int
    shown: str          # how messages name the file (a URL without credentials, or a path)

    def read(self, start: int, length: int) -> bytes:
        """Exactly length bytes from start (Mismatch when fewer or more arrive)."""
        raise NotImplementedError

    def checked(self, rel: str, call: Callable[[], T]) -> T:
        """call(), whose Mismatch means "what arrived is wrong": locally a SampleError for that
        input; remotely tried again, then one RemoteError naming the URL (and rel inside it)."""
        raise NotImplementedError

    @property
    def remote(self) -> bool:
        return False


class LocalBlob(Blob):
    """A local file, opened once per process and read with pread (threads share it)."""

    def __init__(self, path: str) -> None:
        self.path = self.shown = path
        try:
            self.size = os.stat(path).st_size
        except OSError as exc:
            raise UsageError(f"cannot read ({exc.strerror})", path=path) from None
        self._fd: Optional[int] = None
        self._pid = -1

    def read(self, start: int, length: int) -> bytes:
        _check_length(length)
        if self._fd is None or self._pid != os.getpid():
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            self._pid = os.getpid()
        data = os.pread(self._fd, length, start)
        if len(data) != length:
            raise Mismatch(f"the file ends at byte {start + len(data)}, before the {length} bytes from {start} "
                           "its listing promised (truncated)")
        return data

    def checked(self, rel: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except Mismatch as exc:
            raise SampleError(str(exc)) from None

    def __getstate__(self) -> Any:
        return {"path": self.path, "shown": self.shown, "size": self.size, "_fd": None, "_pid": -1}


class RemoteBlob(Blob):
    """An object in a store, read by ranged GETs; size is its listed size."""

    def __init__(self, location: RemoteLocation, rel: str, size: int) -> None:
        self.location, self.rel, self.size = location, rel, size
        self.shown = location.name(rel) if rel else location.shown
        self.path = location.path(rel) if rel else location.root

    @property
    def remote(self) -> bool:
        return True

    def read(self, start: int, length: int) -> bytes:
        _check_length(length)
        if length == 0:
            return b""
        data = self.location.fs.cat_file(self.path, start=start, end=start + length)
        if len(data) != length:
            whole = " (the server sent the whole object: it ignores range requests)" \
                if len(data) == self.size and length < self.size else ""
            raise Mismatch(f"asked for {length} bytes at {start}, received {len(data)}{whole}")
        return bytes(data)

    def checked(self, rel: str, call: Callable[[], T]) -> T:
        return retried(self.location, self.rel, f"read {rel}" if rel else "read", call)


class Window(Blob):
    """Bytes [start, start + len(data)) of a blob, fetched already: reads inside come from memory,
    others go to the blob (so one ranged GET can serve several archive members)."""

    def __init__(self, blob: Blob, start: int, data: bytes) -> None:
        self.blob, self.start, self.data = blob, start, data
        self.size, self.shown = blob.size, blob.shown

    def read(self, start: int, length: int) -> bytes:
        offset = start - self.start
        if 0 <= offset and offset + length <= len(self.data):
            return self.data[offset:offset + length]
        return self.blob.read(start, length)


def _check_length(length: int) -> None:
    if length > MAX_READ_BYTES:
        raise SampleError(f"would read {length} bytes at once, more than the {MAX_READ_BYTES} accepted")


def open_blob(src: str, storage_options: Optional[Mapping[str, Any]] = None) -> Blob:
    """The Blob of the file at src: a local path, or a URL (whose object's size is looked up, retried)."""
    if not is_url(src):
        return LocalBlob(src)
    location, rel = single_object(src, storage_options)
    info = retried(location, rel, "look up", lambda: location.fs.info(location.path(rel)))
    if info.get("size") is None:
        raise UsageError("the store does not tell this object's size; it cannot be read as an archive",
                         path=location.name(rel))
    return RemoteBlob(location, rel, int(info["size"]))


def single_object(url: str, storage_options: Optional[Mapping[str, Any]] = None) -> Tuple[RemoteLocation, str]:
    """(the location of the folder holding the object at url, the object's name in it), so that
    messages name the object's URL; a URL with a query (a signed URL) stays whole, with name ""."""
    parts = urlsplit(url)
    folder, _, name = parts.path.rpartition("/")
    if parts.query or not name:
        return RemoteLocation(url, storage_options), ""
    return RemoteLocation(urlunsplit((parts.scheme, parts.netloc, folder, "", "")), storage_options), name


class BlobStream(io.RawIOBase):
    """A read-only, seekable file over bytes [start, start + size) of a blob, fetched in blocks of
    STREAM_BLOCK (retried where the blob is remote): what tarfile and zipfile read from."""

    def __init__(self, blob: Blob, start: int = 0, size: Optional[int] = None) -> None:
        super().__init__()
        self.blob, self.start = blob, start
        self.size = blob.size - start if size is None else size
        self.position = 0
        self._block_start, self._block = 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def read(self, size: Optional[int] = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        if end <= self.position:
            return b""
        _check_length(end - self.position)
        parts = []
        while self.position < end:
            offset = self.position - self._block_start
            if not 0 <= offset < len(self._block):
                self._fill()
                offset = 0
            piece = self._block[offset:offset + end - self.position]
            parts.append(piece)
            self.position += len(piece)
        return b"".join(parts)

    def _fill(self) -> None:
        """Fetch the block holding position; near the end, the whole last block (a zip's end
        record and central directory come in one request)."""
        first = max(0, min(self.position, self.size - STREAM_BLOCK))
        length = min(STREAM_BLOCK, self.size - first)
        fetch: Callable[[], bytes] = lambda: self.blob.read(self.start + first, length)   # noqa: E731
        self._block = self.blob.checked("", fetch)
        self._block_start = first


__all__ = ["Blob", "BlobStream", "LocalBlob", "MAX_READ_BYTES", "RemoteBlob", "Window", "open_blob", "single_object"]
