"""Writing the dataset's sample table (sample_table.py) from the tables of its finished shards:
the last file convert and merge write before the manifest."""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Any, Dict, Optional

import numpy as np

from ..formats import get_format, open_checked, recorded_options
from ..integrity import create_new, durable_replace, temp_path
from ..manifest import Manifest
from ..sample_table import ROW_DTYPE, TABLE_NAME


def write_sample_table(dst: str, manifest: "Manifest", name: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """Write DST/<name> (by default the manifest's table, else sample_table.bin) from the tables of
    the manifest's shards (each opened through the checked path) and give its manifest entry; None,
    writing nothing and removing an older table, when the dataset has no sample or a shard stores
    no such tables (LMDB records)."""
    name = name or (manifest.sample_table or {}).get("path", TABLE_NAME)
    final = os.path.join(dst, name)
    manifest = dataclasses.replace(manifest, sample_table=None)     # the table being written is not checked against
    if manifest.num_samples:
        fmt = get_format(manifest.format_name)
        options = recorded_options(fmt, manifest, dst)
        tmp = temp_path(final)
        digest = hashlib.sha256()
        try:
            with os.fdopen(create_new(tmp), "wb") as handle:
                for shard in range(len(manifest.shards)):
                    reader = open_checked(fmt, manifest, dst, shard, options)
                    try:
                        tables = reader.tables()
                        if tables is None:
                            break
                        rows = np.empty(len(tables[0]), dtype=ROW_DTYPE)
                        rows["label"], rows["crc32"] = tables
                    finally:
                        reader.close()
                    data = rows.tobytes()
                    digest.update(data)
                    handle.write(data)
                else:
                    handle.flush()
                    os.fsync(handle.fileno())
                    size = handle.tell()
                    durable_replace(tmp, final)
                    return {"path": name, "size": size, "sha256": digest.hexdigest()}
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    if os.path.lexists(final):
        os.unlink(final)
    return None
