"""HDF5 shards' constants shared by the writer, the reader and the safety checks (formats/hdf5.md)."""
from __future__ import annotations

FORMAT_NAME = "hdf5"
FORMAT_VERSION = 3
#: Chunk of the packed byte stream; a random read decompresses at most two of them.
BYTES_CHUNK = {"none": 1 << 20, "gzip": 1 << 17, "lzf": 1 << 17}
#: Target chunk size for fixed-shape arrays (at least one sample per chunk).
ARRAY_CHUNK = {"none": 1 << 20, "gzip": 1 << 16, "lzf": 1 << 16}
#: Upper bound of how much larger gzip or lzf data can be than its stored bytes (deflate's
#: limit is about 1032:1): a dataset claiming more is not backed by the file.
MAX_EXPANSION = 1100
#: Largest chunk a reader accepts (the writer's are at most 1 MiB, or one sample when a sample is
#: larger): reading one byte inflates its whole chunk, so a crafted huge chunk is a memory bomb.
MAX_CHUNK_BYTES = 4 << 20
