"""Whole-file hashing and the durable-write helpers (fsync, atomic replace)."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Tuple, Union

from .errors import CorruptShardError, OutOfFilesError

#: errno values of a process out of descriptors or maps (mmap gives ENOMEM past vm.max_map_count).
OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOMEM)

HASH_ALGORITHM = "sha256"
_BLOCK = 4 * 1024 * 1024

PathLike = Union[str, "os.PathLike[str]"]


def hash_file(path: PathLike) -> str:
    """Hex sha256 of a whole file, read in large blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(_BLOCK)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


class NotAShardFile(ValueError):
    """A path that must be a regular file inside a folder is a link, a special file, or outside
    the folder; the file and the problem are kept apart, for callers that name the file already."""

    def __init__(self, path: PathLike, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = os.fspath(path), problem

    def __reduce__(self) -> "tuple[type, tuple[Any, ...]]":
        return (self.__class__, (self.path, self.problem))


class WrongSize(NotAShardFile):
    """A regular file that does not have the size expected."""

    def __init__(self, path: PathLike, size: int, expected: int) -> None:
        super().__init__(path, f"has {size} bytes, expected {expected}")
        self.size, self.expected = size, expected

    def __reduce__(self) -> "tuple[type, tuple[Any, ...]]":
        return (self.__class__, (self.path, self.size, self.expected))


def open_regular(path: PathLike, root: PathLike, size: int) -> int:
    """A read-only fd of path, if it is a regular file (not a link, FIFO or device) of exactly
    `size` bytes whose real path is inside root; NotAShardFile otherwise, OSError if missing.

    The entry is looked at before it is opened for reading (so a FIFO or device never is), then
    opened O_NOFOLLOW|O_NONBLOCK and checked with fstat to be that same file of that size.
    """
    real, entry = _look_at(path)
    if stat.S_ISLNK(entry.st_mode):
        raise NotAShardFile(path, "is a symbolic link")
    if not _is_inside(real, _real_root(root)):
        raise NotAShardFile(path, f"lies outside {root}")
    if not stat.S_ISREG(entry.st_mode):
        raise NotAShardFile(path, "is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAShardFile(path, "is a symbolic link") from None
        raise
    return _same_file(fd, path, entry, size)


def _same_file(fd: int, path: PathLike, entry: os.stat_result, size: int) -> int:
    """fd, once fstat shows it is the regular file `entry` looked at before the open, of `size`
    bytes; closed and NotAShardFile (WrongSize) otherwise."""
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (entry.st_dev, entry.st_ino) or not stat.S_ISREG(info.st_mode):
            raise NotAShardFile(path, "was replaced while it was opened")
        if info.st_size != size:
            raise WrongSize(path, info.st_size, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


class ShardFolder:
    """A folder of shard files held open, once checked to be a folder (not a link) inside root: a
    plain name in it then opens as open_regular opens a path, by the folder's descriptor (an lstat,
    an open and an fstat), with no walk of the path and no look at /proc. A dataset's quick opens
    of thousands of small shards use it (read/shards.py); the descriptor closes with the object."""

    def __init__(self, folder: str, root: PathLike) -> None:
        real, entry = _look_at(folder)
        if not stat.S_ISDIR(entry.st_mode) or not _is_inside(real, _real_root(root)):
            raise NotAShardFile(folder, "is not a folder inside the dataset")
        self.folder = folder
        self.fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                          | getattr(os, "O_CLOEXEC", 0))
        self._closer = weakref.finalize(self, os.close, self.fd)
        info = os.fstat(self.fd)
        if (info.st_dev, info.st_ino) != (entry.st_dev, entry.st_ino):
            self._closer()
            raise NotAShardFile(folder, "was replaced while it was opened")

    def open(self, name: str, size: int) -> int:
        """A read-only descriptor of the file `name` (no separator) in the folder, if it is a
        regular file of `size` bytes (not a link, FIFO or device, looked at before it is opened);
        NotAShardFile (WrongSize) otherwise, OSError if missing. The caller closes it."""
        if os.sep in name or (os.altsep and os.altsep in name) or name in ("", ".", ".."):
            raise NotAShardFile(name, "is not a plain file name")
        entry = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        if not stat.S_ISREG(entry.st_mode):
            raise NotAShardFile(name, "is not a regular file")
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0), dir_fd=self.fd)
        return _same_file(fd, name, entry, size)

    def __reduce__(self) -> "tuple[type, tuple[Any, ...]]":
        raise TypeError("a ShardFolder holds a descriptor: it never crosses processes")


#: Whether /proc/self/fd names open descriptors here (Linux).
_PROC_FD = os.path.isdir("/proc/self/fd")


def fd_path(fd: "int | None", path: str) -> str:
    """A name that opens the very file fd is open on, whatever happened to path since it was
    checked (Linux: /proc/self/fd/N), for libraries that open files by name (h5py, lmdb, torch);
    path itself when fd is None or the system has no /proc."""
    return f"/proc/self/fd/{fd}" if fd is not None and _PROC_FD else path


#: Open a name without following a final link or touching what it names (Linux); None elsewhere.
_LOOK_FLAGS = (os.O_PATH | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)) if hasattr(os, "O_PATH") else None


def _look_at(path: PathLike) -> "tuple[str, os.stat_result]":
    """(real path, lstat) of a name: its real path as the kernel names an O_PATH fd of it in
    /proc/self/fd, one system call where os.path.realpath takes one per component; realpath and
    lstat where O_PATH or /proc is missing. OSError if the name does not exist."""
    if _LOOK_FLAGS is not None:
        fd = os.open(path, _LOOK_FLAGS)
        try:
            return os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
    return os.path.realpath(path), os.lstat(path)


def _is_inside(real: str, real_root: str) -> bool:
    """True when the real path `real` is real_root or below it."""
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


_REAL_ROOTS: Dict[str, Tuple[Tuple[int, int], str]] = {}


def _real_root(root: PathLike) -> str:
    """os.path.realpath(root), resolved again only when root now names another directory (one
    stat instead of a walk over every component: verify and first opens call this per shard)."""
    key = os.fspath(root)
    info = os.stat(key)
    known = _REAL_ROOTS.get(key)
    if known is None or known[0] != (info.st_dev, info.st_ino):
        if len(_REAL_ROOTS) >= 1024:
            _REAL_ROOTS.clear()
        known = _REAL_ROOTS[key] = ((info.st_dev, info.st_ino), os.path.realpath(key))
    return known[1]


def hash_shard_file(path: PathLike, root: PathLike, size: int) -> str:
    """Hex sha256 of exactly `size` bytes of a regular file inside root (open_regular), read
    from the fd that was checked; NotAShardFile if it is anything else or changes size."""
    fd = open_regular(path, root, size)
    try:
        return hash_open_file(fd, path, size)
    finally:
        os.close(fd)


def hash_open_file(fd: int, path: PathLike, size: int) -> str:
    """Hex sha256 of bytes [0, size) of the file open at fd (read with pread: the descriptor's
    position is left alone); NotAShardFile naming path if it ends sooner."""
    digest = hashlib.sha256()
    position = 0
    while position < size:
        block = os.pread(fd, min(_BLOCK, size - position), position)
        if not block:
            raise NotAShardFile(path, f"ended after {position} of {size} bytes")
        digest.update(block)
        position += len(block)
    return digest.hexdigest()


def private_copy(fd: int, path: str, size: int, sha256: str, shard: "int | str") -> int:
    """A descriptor of a private copy of `size` bytes of the file open at fd, made while hashing
    them: an anonymous file in memory (memfd) where the system has one, else an unlinked temporary
    file. What is read through it later is exactly what was hashed, whatever then happens to the
    file. CorruptShardError naming path when its sha256 is not `sha256`."""
    if hasattr(os, "memfd_create"):
        copy = os.memfd_create("shardkit-shard", os.MFD_CLOEXEC)
    else:
        import tempfile
        handle, name = tempfile.mkstemp(prefix="shardkit-shard-")
        os.unlink(name)
        copy = handle
    try:
        digest, position = hashlib.sha256(), 0
        while position < size:
            block = os.pread(fd, min(_BLOCK, size - position), position)
            if not block:
                raise CorruptShardError("is truncated: it has", path=path, actual=f"{position} bytes", expected=size)
            digest.update(block)
            view = memoryview(block)
            while view:
                view = view[os.write(copy, view):]
            position += len(block)
        if digest.hexdigest() != sha256:
            raise CorruptShardError("fails its sha256 check (its bytes changed after conversion)", path=path,
                                    shard=shard)
    except BaseException:
        os.close(copy)
        raise
    return copy


def open_shard_file(path: str, root: str, size: int, name: str) -> int:
    """A read-only descriptor of path, if it is a regular file of `size` bytes inside root (no link,
    FIFO or device: open_regular); CorruptShardError naming the file and `name`
    ("shard 3") otherwise. The caller closes it."""
    try:
        return open_regular(path, root, size)
    except WrongSize as exc:
        raise CorruptShardError("is truncated or replaced: it has", path=path, actual=f"{exc.size} bytes",
                                expected=size) from None
    except NotAShardFile as exc:
        raise CorruptShardError(f"{exc.problem}; {name} is read only as a regular file inside the "
                                "dataset", path=path) from None
    except OSError as exc:
        if exc.errno in OUT_OF_FILES:
            raise OutOfFilesError(path) from None
        raise CorruptShardError(f"{name} is missing", path=path) from None


def fsync_path(path: PathLike) -> None:
    """fsync a file or directory by path so a crash cannot lose what was written."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if os.path.isdir(path) else os.O_RDONLY
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_replace(tmp: PathLike, final: PathLike) -> None:
    """Rename tmp over final and fsync the directory, so the new name survives a crash."""
    os.replace(tmp, final)
    fsync_path(os.path.dirname(os.path.abspath(final)))


class SharedFolderSync:
    """fsync of a folder for threads that each renamed a file into it: a caller returns once an
    fsync that began after its call has finished, so one fsync covers every rename made before it
    began and concurrent commits share it instead of queueing one each. One folder per object."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._tickets = 0       # calls so far; call n needs an fsync begun after it (covered > n)
        self._covered = 0
        self._busy = False

    def __call__(self, folder: PathLike) -> None:
        with self._changed:
            ticket = self._tickets
            self._tickets += 1
            while self._covered <= ticket:
                if not self._busy:
                    self._busy, upto = True, self._tickets
                    break
                self._changed.wait()
            else:
                return
        try:
            fsync_path(folder)
            with self._changed:
                self._covered = max(self._covered, upto)
        finally:
            with self._changed:
                self._busy = False
                self._changed.notify_all()


#: fsyncs a folder by path (fsync_path, or a SharedFolderSync).
FolderSync = Callable[[PathLike], None]


#: Flags of every file shardkit creates next to its final name: a new file, never through a link.
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def temp_path(final: PathLike) -> Path:
    """An unpredictable temporary name next to final (.NAME.tmp-RANDOM), so nobody can plant a
    link under it in advance."""
    final = Path(final)
    return final.with_name(f".{final.name}.tmp-{secrets.token_hex(8)}")


def create_new(path: PathLike) -> int:
    """A write-only fd of a file created here and now (O_EXCL|O_NOFOLLOW): FileExistsError if
    anything, a symbolic link included, is already at path."""
    return os.open(path, CREATE_FLAGS, 0o644)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write a file so readers see either the old content or the complete new one, durably."""
    _write_then_replace(path, data, durable=True)


def replace_bytes(path: PathLike, data: bytes) -> None:
    """atomic_write_bytes without its two fsyncs: for records that may be lost in a crash, because
    whoever reads them checks them against durable files (a conversion's done records)."""
    _write_then_replace(path, data, durable=False)


def _write_then_replace(path: PathLike, data: bytes, durable: bool) -> None:
    path = Path(path)
    tmp = temp_path(path)
    try:
        with os.fdopen(create_new(tmp), "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if durable:
            durable_replace(tmp, path)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)      # a full disk must not leave a half-written temporary behind
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None   # name the file it was for
        raise


def json_bytes(obj: Any) -> bytes:
    """The one serialization of every JSON file shardkit writes: stable and human-readable."""
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def atomic_write_json(path: PathLike, obj: Any) -> None:
    """atomic_write_bytes of json_bytes(obj)."""
    atomic_write_bytes(path, json_bytes(obj))
