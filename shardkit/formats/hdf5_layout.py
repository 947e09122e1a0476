"""HDF5 shards' constants shared by the writer, the reader and the safety checks (formats/hdf5.md)."""
from __future__ import annotations

from ..schema import SampleSchema

FORMAT_NAME = "hdf5"
FORMAT_VERSION = 3
#: Chunk of the packed byte stream; a random read decompresses at most two of them.
BYTES_CHUNK = {"none": 1 << 20, "gzip": 1 << 17, "lzf": 1 << 17}
#: Target chunk size for fixed-shape arrays (at least one sample per chunk).
ARRAY_CHUNK = {"none": 1 << 20, "gzip": 1 << 16, "lzf": 1 << 16}
#: Upper bound of how much larger gzip or lzf data can be than its stored bytes (deflate's
#: limit is about 1032:1): a dataset claiming more is not backed by the file.
MAX_EXPANSION = 1100
#: Largest chunk of a table other than /data a reader accepts (the writer stores them contiguous):
#: reading one byte reads its whole chunk, so a crafted huge chunk is a memory bomb.
MAX_CHUNK_BYTES = 4 << 20


def chunk_limit(schema: SampleSchema) -> int:
    """Most bytes one chunk of /data holds as the writer cuts it for the schema's compression: the
    target size, or one sample when a sample is larger. A reader refuses larger chunks, since a read
    inflates its whole chunk."""
    target = (ARRAY_CHUNK if schema.is_array else BYTES_CHUNK)[schema.compression]
    return max(target, schema.sample_nbytes)
