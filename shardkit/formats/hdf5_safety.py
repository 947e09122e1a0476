"""What an HDF5 shard may contain before any of it is read: only datasets stored in the file, the
one filter the writer uses for the schema's compression, chunks no larger than the writer cuts. A
shard's checksum covers only its own bytes, so anything read from elsewhere (links, external storage,
plugin filters) would get around verify; and a chunk is inflated whole on every read."""
from __future__ import annotations

import math
from typing import Any, Tuple

import h5py

from ..schema import SampleSchema
from .hdf5_layout import MAX_CHUNK_BYTES, chunk_limit

#: The filter pipeline of a chunked /data by the schema's compression, exactly as the writer sets it;
#: every other dataset has none. Both filters are built into HDF5 and h5py, never loaded from a plugin.
DATA_FILTERS = {"none": (), "gzip": (h5py.h5z.FILTER_DEFLATE,), "lzf": (h5py.h5z.FILTER_LZF,)}
STORED_LAYOUTS = (h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED, h5py.h5d.COMPACT)


def disable_filter_plugins() -> None:
    """Empty HDF5's plugin search path, so no filter plugin library (from HDF5_PLUGIN_PATH or
    the default folders) can be loaded into this process by a shard naming its filter id."""
    while h5py.h5pl.size():
        h5py.h5pl.remove(0)


def check_self_contained(handle: h5py.File, schema: SampleSchema) -> None:
    """Raise ValueError unless every member of the file is a hard link to a dataset whose bytes
    are in this file: no soft or external links, external raw storage or virtual layouts; filters
    only on a chunked /data and exactly DATA_FILTERS[schema.compression] (not the same filter twice,
    not shuffle or fletcher32); chunks of /data within chunk_limit(schema), other chunks within
    MAX_CHUNK_BYTES (or one row), none larger than its dataset.

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
        _check_storage(name.decode(errors="replace"), dsid, schema)


def _check_storage(name: str, dsid: Any, schema: SampleSchema) -> None:
    dcpl = dsid.get_create_plist()
    layout = dcpl.get_layout()
    if layout not in STORED_LAYOUTS:
        raise ValueError(f"/{name} has a virtual layout (its data lives in other files)")
    if dcpl.get_external_count():
        raise ValueError(f"/{name} keeps its data in external files")
    is_data = name == "data" and layout == h5py.h5d.CHUNKED
    _check_filters(name, tuple(dcpl.get_filter(number)[0] for number in range(dcpl.get_nfilters())),
                   DATA_FILTERS.get(schema.compression, ()) if is_data else ())
    if layout != h5py.h5d.CHUNKED:
        return
    # plain ints and the type's size: numpy here (np.prod, dsid.dtype) cost more than the HDF5 calls
    chunks, shape, itemsize = tuple(dcpl.get_chunk()), tuple(dsid.shape), dsid.get_type().get_size()
    row_bytes = math.prod(shape[1:]) * itemsize
    chunk_bytes = math.prod(chunks) * itemsize
    limit = chunk_limit(schema) if is_data else max(MAX_CHUNK_BYTES, row_bytes)
    if any(chunk > max(1, size) for chunk, size in zip(chunks, shape)) or chunk_bytes > limit:
        raise ValueError(f"/{name} has chunks of {chunks} ({chunk_bytes} bytes) for shape {shape}; "
                         f"chunks may not exceed the dataset or {limit} bytes")


def _check_filters(name: str, codes: Tuple[int, ...], expected: Tuple[int, ...]) -> None:
    """ValueError unless a dataset's filter pipeline is exactly what the writer gives it: a filter
    listed twice (a chunk deflated twice inflates a thousand times a thousandfold), one the writer
    never uses, or a plugin's."""
    if codes != expected:
        raise ValueError(f"/{name} has the HDF5 filter pipeline {list(codes)}, expected {list(expected)}: "
                         "shardkit reads only the filters its writer uses")
