"""Read-only maps of shard files that hold no descriptor of their own (Linux).

Python's mmap keeps a duplicate of the file's descriptor for as long as the map lives, and a map
lives as long as any array viewing it: a batch holding rows of sixty shards would hold sixty
descriptors whatever `max_open_shards` says. Here a map is a range of read-only anonymous memory
(an mmap object made without a file, which Python's buffers and numpy views keep alive as usual)
with the file mapped over it by libc (`MAP_FIXED`); the caller closes its descriptor at once. The
range, with the file in it, is unmapped when the mmap object is freed or closed. Elsewhere (no
libc mmap) it is a plain mmap of the file.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
from typing import Any, List, Optional

PAGE = mmap.PAGESIZE
#: MAP_FIXED is 0x10 on every Linux architecture; Python's mmap module does not name it.
MAP_FIXED = 0x10
MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
MADV_RANDOM = getattr(mmap, "MADV_RANDOM", 1)


def _libc(name: str, argtypes: List[Any], restype: Any) -> Optional[Any]:
    """A libc function through ctypes, or None (not Linux, no libc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = getattr(ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    call.restype, call.argtypes = restype, argtypes
    return call


MMAP = _libc("mmap", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long],
             ctypes.c_void_p)
MADVISE = _libc("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int)


def address(buffer: Any) -> int:
    """The address of a buffer's first byte (an mmap or an ndarray), read without touching it."""
    import numpy as np
    array = buffer if isinstance(buffer, np.ndarray) else np.frombuffer(buffer, np.uint8, count=1)
    return int(array.__array_interface__["data"][0])


def map_over(begin: int, length: int, fd: int, offset: int, readahead: bool = True, populate: bool = False) -> bool:
    """Map `length` bytes of the file open as fd from `offset` (a page multiple) read-only and shared
    at address `begin` (a page start inside a range the caller reserved); False when it fails."""
    assert MMAP is not None
    flags = mmap.MAP_SHARED | MAP_FIXED | (MAP_POPULATE if populate and readahead else 0)
    if MMAP(begin, length, mmap.PROT_READ, flags, fd, offset) != begin:
        return False
    if not readahead and MADVISE is not None:
        MADVISE(begin, length, MADV_RANDOM)     # fault in only the pages a read touches
    return True


def map_region(fd: int, offset: int, length: int, readahead: bool = True) -> "tuple[mmap.mmap, int]":
    """(map, start): bytes [offset, offset + length) of the file open as fd are map[start:start +
    length]; the map holds no descriptor where the system allows (see the module doc), and reads
    ahead of the pages touched only with `readahead`. OSError when the file cannot be mapped."""
    start = offset % PAGE
    size = start + length
    if MMAP is None or size == 0:
        view = mmap.mmap(fd, size, access=mmap.ACCESS_READ, offset=offset - start)
        if not readahead and hasattr(mmap, "MADV_RANDOM"):
            view.madvise(mmap.MADV_RANDOM)
        return view, start
    view = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)
    if not map_over(address(view), size, fd, offset - start, readahead):
        view.close()
        raise OSError(ctypes.get_errno(), "cannot map the shard file")
    return view, start
