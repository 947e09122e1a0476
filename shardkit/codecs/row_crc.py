"""zlib.crc32 of every row of a block of fixed-width records, for all rows at once.

CRC-32 is affine over GF(2): for messages of one width W, crc(m) = crc(W zero bytes) XOR the
XOR over positions j of T_j[m_j], where T_j[b] is what byte b at position j adds. The W tables
(256 uint32 each) are built once per width. A small block (a located shard's rows, checked at
every first open) looks up all its bytes at once and XORs each row's W values: a handful of numpy
calls. A block of many rows is taken one byte position at a time over passes of rows (one table
lookup and one XOR per position), which stays in the CPU cache. Past TABLE_MAX_WIDTH
bytes a row's lookups cost more than a zlib call on it: there zlib runs per row.
"""
from __future__ import annotations

import functools
import zlib
from typing import Tuple

import numpy as np

#: Widest row whose CRCs come from the tables (wider rows: one zlib call each, the faster there).
TABLE_MAX_WIDTH = 96
#: Fewer rows than this many per byte of width: every byte looked up at once (about 2 ns a byte
#: and 4 us a call) beats a pass per byte position (about 2 us a position): 100 rows of 16 bytes,
#: a small located shard's, in 9 us, against 19 us for a zlib call per row and 37 us in passes.
ONE_LOOKUP_ROWS_PER_BYTE = 32
#: Rows per pass over the tables: a pass's columns stay in the CPU cache.
ROWS_PER_PASS = 1 << 14
_POLY = 0xEDB88320                   # CRC-32 (zlib, gzip, PNG), bit-reversed


@functools.lru_cache(maxsize=1)
def _byte_table() -> np.ndarray:
    """The byte-wise CRC-32 table: what a byte adds to the register it is shifted out of."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    table.setflags(write=False)
    return table


@functools.lru_cache(maxsize=8)
def _tables(width: int) -> Tuple[np.ndarray, int, np.ndarray]:
    """(T, crc of `width` zero bytes, 256 * j for each position j): T[j][b] is the linear part of
    the CRC of byte b at position j, and T.ravel()[256 * j + b] the same."""
    table = _byte_table()                               # the byte-wise table of the last position
    tables = np.empty((width, 256), dtype=np.uint32)
    if width:
        tables[width - 1] = table
    for position in range(width - 2, -1, -1):          # one more zero byte after it
        after = tables[position + 1]
        tables[position] = table[after & 0xFF] ^ (after >> 8)
    tables.setflags(write=False)
    starts = np.arange(0, 256 * width, 256, dtype=np.uint16)      # TABLE_MAX_WIDTH * 256 fits
    starts.setflags(write=False)
    return tables, zlib.crc32(bytes(width)), starts


def row_crc32(rows: np.ndarray) -> np.ndarray:
    """uint32 zlib.crc32 of each row of a C-contiguous 2-D uint8 array (n rows of the same width)."""
    count, width = rows.shape
    if width > TABLE_MAX_WIDTH:
        flat = memoryview(rows.reshape(-1))
        crc32 = zlib.crc32
        return np.fromiter((crc32(flat[start:start + width]) for start in range(0, count * width, width)),
                           dtype=np.uint32, count=count)
    tables, zero, starts = _tables(width)
    if count < ONE_LOOKUP_ROWS_PER_BYTE * width:      # every byte's entry at once, then each row's XOR
        crcs = np.bitwise_xor.reduce(tables.reshape(-1).take(rows + starts), axis=1)
        crcs ^= np.uint32(zero)
        return crcs
    crcs = np.full(count, zero, dtype=np.uint32)
    looked_up = np.empty(min(count, ROWS_PER_PASS), dtype=np.uint32)
    for first in range(0, count, ROWS_PER_PASS):
        part, found = rows[first:first + ROWS_PER_PASS], crcs[first:first + ROWS_PER_PASS]
        into = looked_up[:len(part)]
        for position in range(width):
            np.take(tables[position], part[:, position], out=into)
            found ^= into
    return crcs


__all__ = ["TABLE_MAX_WIDTH", "row_crc32"]
