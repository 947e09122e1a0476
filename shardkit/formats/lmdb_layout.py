"""The byte layout of an LMDB shard (formats/lmdb.md is the contract): its reserved keys, the
per-sample record header, blocks of fixed-shape rows and the sample keys; shared by the writer
(lmdb_writer.py) and the reader (lmdb_reader.py)."""
from __future__ import annotations

import re
import struct
from typing import List

from ..schema import SampleSchema

#: The format's name and on-disk version, as the metadata record states them.
FORMAT_NAME = "lmdb"
FORMAT_VERSION = 2
META_KEY = b"__meta__"
LABELS_KEY = b"__labels__"
CRCS_KEY = b"__crc32__"
KEYS_KEY = b"__keys__"
KEY_BLOCKS_KEY = b"__key_blocks__"
#: magic b"SK", record version, flags, crc32, label, raw (uncompressed) length, stored length.
RECORD = struct.Struct("<2sBBIqQQ")
RECORD_MAGIC = b"SK"
RECORD_VERSION = 1
FLAG_ZLIB = 0x01
#: Largest block of fixed-shape rows in one value: 16 pages of 4 KiB less the overflow page header.
BLOCK_BYTES = 16 * 4096 - 16
MAX_META_BYTES = 1 << 20


def rows_per_block(schema: SampleSchema) -> int:
    """Samples per value: uncompressed fixed-shape rows are stored in blocks of up to BLOCK_BYTES
    without a header (0: one record with a header per sample)."""
    if not schema.is_array or schema.compression != "none":
        return 0
    return max(1, BLOCK_BYTES // max(1, schema.sample_nbytes))


def sample_key(index: int) -> bytes:
    """The key of record (or block) index: 8 bytes, big-endian, so keys sort in sample order."""
    return int(index).to_bytes(8, "big")


def sample_keys(first: int, count: int) -> List[bytes]:
    """sample_key() of records first, first + 1, ... (count of them)."""
    return [index.to_bytes(8, "big") for index in range(int(first), int(first) + count)]


def short_message(exc: BaseException, path: str) -> str:
    """The first line of an LMDB error, without the file it names (the caller names it): path, or
    the /proc/self/fd name it was opened by."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return re.sub(r"^/proc/self/fd/\d+: ", "", text.replace(f"{path}: ", ""))
