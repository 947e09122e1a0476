"""Where a value of an LMDB shard lies in its file, found from LMDB's own pages with a few preads
and no lmdb library (LMDB 0.9's data format, the one py-lmdb writes; formats/lmdb.md).

The file is untrusted: every page number, pointer and length is checked against the file and the
page before it is used, and anything unexpected gives None (the lmdb library then reads the shard,
with every check of the reader). What this finds is only a claim about where bytes lie: the caller
trusts those bytes once they match the dataset's sample table.
"""
from __future__ import annotations

import os
import struct
from typing import Dict, Optional, Sequence, Tuple

_PAGE_HEADER = struct.Struct("<QHHHH")      # pgno, pad, flags, lower, upper (overflow: pages as lower+upper)
_META = struct.Struct("<II8x8x" "IHH5Q" "IHH5Q" "QQ")   # magic, version, address, mapsize, two MDB_db, last page, txnid
_NODE = struct.Struct("<HHHH")              # lo, hi, flags, key size
_MAGIC, _DATA_VERSION = 0xBEEFC0DE, 1
_BRANCH, _LEAF, _OVERFLOW, _META_PAGE = 0x01, 0x02, 0x04, 0x08
_BIGDATA = 0x01
_MAX_DEPTH = 16
_MAX_KEY = 511


class _Pages:
    """Pages of the file open as fd, read with one pread each; a branch or leaf page read and
    parsed once for all the keys looked up (the keys of a small shard share one leaf)."""

    def __init__(self, fd: int, size: int, page_size: int) -> None:
        self.fd, self.size, self.page_size = fd, size, page_size
        self.count = size // page_size
        self._parsed: Dict[int, Tuple[Optional[bytes], Optional[list]]] = {}

    def nodes(self, number: int) -> Tuple[Optional[bytes], Optional[list]]:
        """(page, its nodes) of a branch or leaf page: (None, None) when it cannot be read, nodes
        None when they are not laid out as expected (_nodes)."""
        found = self._parsed.get(number)
        if found is None:
            page = self.read(number)
            found = self._parsed[number] = (page, None if page is None else _nodes(page))
        return found

    def read(self, number: int) -> Optional[bytes]:
        if not 0 <= number < self.count:
            return None
        page = os.pread(self.fd, self.page_size, number * self.page_size)
        return page if len(page) == self.page_size else None


def _meta(fd: int, size: int) -> Optional[Tuple[int, int]]:
    """(page size, root page of the main database) from the newer of the two meta pages."""
    first = os.pread(fd, 16 + _META.size, 0)
    if len(first) < 16 + _META.size:
        return None
    page_size = _META.unpack_from(first, 16)[2]     # the free database's md_pad holds the page size
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1) or size < 2 * page_size:
        return None
    best: Optional[Tuple[int, int]] = None
    for number in (0, 1):
        raw = first if number == 0 else os.pread(fd, 16 + _META.size, number * page_size)
        if len(raw) < 16 + _META.size or not _PAGE_HEADER.unpack_from(raw)[2] & _META_PAGE:
            return None
        fields = _META.unpack_from(raw, 16)
        magic, version, root, txnid = fields[0], fields[1], fields[-3], fields[-1]
        if magic != _MAGIC or version != _DATA_VERSION or fields[2] != page_size:
            return None
        if best is None or txnid > best[0]:
            best = (txnid, root)
    assert best is not None
    return page_size, best[1]


def _nodes(page: bytes) -> Optional[list]:
    """(key, flags, lo, hi, data offset in page) of every node of a branch or leaf page."""
    _, _, _, lower, upper = _PAGE_HEADER.unpack_from(page)
    if lower < 16 or lower > upper or upper > len(page) or (lower - 16) % 2:
        return None
    found = []
    for k in range((lower - 16) // 2):
        at = struct.unpack_from("<H", page, 16 + 2 * k)[0]
        if at < upper or at + _NODE.size > len(page):
            return None
        lo, hi, flags, key_size = _NODE.unpack_from(page, at)
        start = at + _NODE.size
        if key_size > _MAX_KEY or start + key_size > len(page):
            return None
        found.append((page[start:start + key_size], flags, lo, hi, start + key_size))
    keys = [node[0] for node in found[1:]] if _PAGE_HEADER.unpack_from(page)[2] & _BRANCH else [n[0] for n in found]
    if any(low >= high for low, high in zip(keys, keys[1:])):
        return None         # keys out of order or repeated: LMDB's binary search and this scan could differ
    return found


def _leaf_value(pages: _Pages, number: int, page: bytes, node: tuple) -> Optional[Tuple[int, int]]:
    """(file offset, length) of a leaf node's value: in the page, or in its overflow pages."""
    _, flags, lo, hi, at = node
    length = lo | hi << 16
    if not flags & _BIGDATA:
        return (number * pages.page_size + at, length) if at + length <= len(page) else None
    if at + 8 > len(page):
        return None
    overflow = struct.unpack_from("<Q", page, at)[0]
    head = pages.read(overflow)
    if head is None:
        return None
    _, _, kind, low, high = _PAGE_HEADER.unpack_from(head)
    span = low | high << 16
    if not kind & _OVERFLOW or span * pages.page_size < 16 + length or overflow + span > pages.count:
        return None
    return overflow * pages.page_size + 16, length


def find_values(fd: int, size: int, keys: Sequence[bytes]) -> Optional[Dict[bytes, Tuple[int, int]]]:
    """(file offset, length) of the value of each key in the main database of the LMDB file open
    as fd (`size` bytes); None when a key is missing or the file is not laid out as expected."""
    meta = _meta(fd, size)
    if meta is None:
        return None
    pages = _Pages(fd, size, meta[0])
    found: Dict[bytes, Tuple[int, int]] = {}
    for key in keys:
        where = _find(pages, meta[1], key)
        if where is None:
            return None
        found[key] = where
    return found


def _find(pages: _Pages, root: int, key: bytes) -> Optional[Tuple[int, int]]:
    """Where one key's value lies: down the branch pages from root to its leaf."""
    number = root
    for _ in range(_MAX_DEPTH):
        page, nodes = pages.nodes(number)
        if page is None or not nodes:
            return None
        kind = _PAGE_HEADER.unpack_from(page)[2]
        if kind & _LEAF:
            match = [node for node in nodes if node[0] == key]
            return _leaf_value(pages, number, page, match[0]) if match else None
        if not kind & _BRANCH:
            return None
        below = [node for position, node in enumerate(nodes) if position == 0 or node[0] <= key][-1]
        number = below[2] | below[3] << 16 | below[1] << 32
    return None
