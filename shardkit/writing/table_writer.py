"""Writing the dataset's sample table (sample_table.py) from the tables of its finished shards:
the last file convert and merge write before the manifest."""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any, Dict, Iterable, Iterator, Optional, Sequence, Tuple

import numpy as np

from ..errors import CorruptShardError
from ..formats import get_format, open_checked, recorded_options
from ..integrity import create_new, durable_replace, temp_path
from ..manifest import Manifest
from ..sample_table import ROW_DTYPE, TABLE_NAME, open_table_file

#: Bytes of a table copied at a time by joined_sample_table.
_BLOCK = 1 << 22


class _NoTable(Exception):
    """What a table's chunks raise when there is no table to write after all."""


def write_sample_table(dst: str, manifest: "Manifest", name: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """Write DST/<name> (by default the manifest's table, else sample_table.bin) from the tables of
    the manifest's shards (each opened through the checked path) and give its manifest entry; None,
    writing nothing and removing an older table, when the dataset has no sample or a shard stores
    no such tables (LMDB records)."""
    name = name or (manifest.sample_table or {}).get("path", TABLE_NAME)
    manifest = dataclasses.replace(manifest, sample_table=None)     # the table being written is not checked against
    entry = _write_table(dst, name, _shard_rows(dst, manifest)) if manifest.num_samples else None
    if entry is None and os.path.lexists(os.path.join(dst, name)):
        os.unlink(os.path.join(dst, name))
    return entry


def _shard_rows(dst: str, manifest: "Manifest") -> Iterator[bytes]:
    """The rows of every shard's own tables, a shard at a time; _NoTable at a shard without them."""
    fmt = get_format(manifest.format_name)
    options = recorded_options(fmt, manifest, dst)
    for shard in range(len(manifest.shards)):
        reader = open_checked(fmt, manifest, dst, shard, options)
        try:
            tables = reader.tables()
            if tables is None:
                raise _NoTable()
            rows = np.empty(len(tables[0]), dtype=ROW_DTYPE)
            rows["label"], rows["crc32"] = tables
        finally:
            reader.close()
        yield rows.tobytes()


def joined_sample_table(dst: str, name: str,
                        tables: Sequence[Tuple[str, Optional[Dict[str, Any]]]]) -> Optional[Dict[str, Any]]:
    """Write DST/<name> as the sample tables of datasets laid end to end (each a root and its
    manifest entry: an append's old dataset, then its staged shards), copying their bytes, each
    table only if it matches its entry's size and sha256, and give its manifest entry; None, with
    nothing written, when one has no table or fails its check (write_sample_table then rebuilds
    the table from the shards). No shard is opened: an append costs the same at any dataset size."""
    if any(entry is None for _, entry in tables):
        return None
    return _write_table(dst, name, (chunk for root, entry in tables for chunk in _checked_chunks(root, entry)))


def _checked_chunks(root: str, entry: Any) -> Iterator[bytes]:
    """The bytes of entry's table (inside root), a block at a time; _NoTable once they prove not
    to match its size and sha256."""
    try:
        fd = open_table_file(root, entry)
    except CorruptShardError:
        raise _NoTable() from None
    own = hashlib.sha256()
    try:
        for offset in range(0, entry["size"], _BLOCK):
            data = os.pread(fd, min(_BLOCK, entry["size"] - offset), offset)
            own.update(data)
            yield data
    finally:
        os.close(fd)
    if own.hexdigest() != entry["sha256"]:
        raise _NoTable()


def _write_table(dst: str, name: str, chunks: Iterable[bytes]) -> Optional[Dict[str, Any]]:
    """DST/<name> written from chunks (fsynced, then renamed into place) and its manifest entry;
    None, with nothing written, when the chunks raise _NoTable."""
    final = os.path.join(dst, name)
    tmp = temp_path(final)
    digest = hashlib.sha256()
    try:
        with os.fdopen(create_new(tmp), "wb") as handle:
            for data in chunks:
                digest.update(data)
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            size = handle.tell()
        durable_replace(tmp, final)
        return {"path": name, "size": size, "sha256": digest.hexdigest()}
    except _NoTable:
        return None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
