"""Whole-file hashing and the durable-write helpers (fsync, atomic replace)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Union

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


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write a file so readers see either the old content or the complete new one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        durable_replace(tmp, path)
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
