"""What an HDF5 shard may contain before any of it is read: only datasets stored in the file,
built-in filters, bounded chunks. A shard's checksum covers only its own bytes, so anything read from
elsewhere (links, external storage, plugin filters) would get around verify."""
from __future__ import annotations

import math
from typing import Any

import h5py

from .hdf5_layout import MAX_CHUNK_BYTES

#: Filters a shard may use: built into HDF5 and h5py, never loaded from a plugin library.
SAFE_FILTERS = frozenset({h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32,
                          h5py.h5z.FILTER_LZF})
STORED_LAYOUTS = (h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED, h5py.h5d.COMPACT)


def disable_filter_plugins() -> None:
    """Empty HDF5's plugin search path, so no filter plugin library (from HDF5_PLUGIN_PATH or
    the default folders) can be loaded into this process by a shard naming its filter id."""
    while h5py.h5pl.size():
        h5py.h5pl.remove(0)


def check_self_contained(handle: h5py.File) -> None:
    """Raise ValueError unless every member of the file is a hard link to a dataset whose bytes
    are in this file: no soft or external links, external raw storage, virtual layouts, filters
    outside SAFE_FILTERS, chunks over MAX_CHUNK_BYTES (or one row) or larger than the dataset.

    A shard's checksum covers only its own bytes, so anything it reads from elsewhere would get
    around verify; and a chunk is inflated whole on every read. Called wherever a shard opens.
    """
    for name in handle.id:                      # low-level: no high-level objects per member
        kind = handle.id.links.get_info(name).type
        if kind != h5py.h5l.TYPE_HARD:
            link = {h5py.h5l.TYPE_SOFT: "SoftLink", h5py.h5l.TYPE_EXTERNAL: "ExternalLink"}.get(kind, "user link")
            raise ValueError(f"/{name.decode(errors='replace')} is a {link}; only datasets stored in the shard "
                             "are read")
        dsid = h5py.h5o.open(handle.id, name)
        if not isinstance(dsid, h5py.h5d.DatasetID):
            raise ValueError(f"/{name.decode(errors='replace')} is not a dataset")
        _check_storage(name.decode(errors="replace"), dsid)


def _check_storage(name: str, dsid: Any) -> None:
    dcpl = dsid.get_create_plist()
    layout = dcpl.get_layout()
    if layout not in STORED_LAYOUTS:
        raise ValueError(f"/{name} has a virtual layout (its data lives in other files)")
    if dcpl.get_external_count():
        raise ValueError(f"/{name} keeps its data in external files")
    for number in range(dcpl.get_nfilters()):
        code = dcpl.get_filter(number)[0]
        if code not in SAFE_FILTERS:
            raise ValueError(f"/{name} uses HDF5 filter {code}, which shardkit does not read")
    if layout != h5py.h5d.CHUNKED:
        return
    # plain ints and the type's size: numpy here (np.prod, dsid.dtype) cost more than the HDF5 calls
    chunks, shape, itemsize = tuple(dcpl.get_chunk()), tuple(dsid.shape), dsid.get_type().get_size()
    row_bytes = math.prod(shape[1:]) * itemsize
    chunk_bytes = math.prod(chunks) * itemsize
    if any(chunk > max(1, size) for chunk, size in zip(chunks, shape)) \
            or chunk_bytes > max(MAX_CHUNK_BYTES, row_bytes):
        raise ValueError(f"/{name} has chunks of {chunks} ({chunk_bytes} bytes) for shape {shape}; "
                         f"chunks may not exceed the dataset or {MAX_CHUNK_BYTES} bytes")
