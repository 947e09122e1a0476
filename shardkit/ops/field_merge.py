"""merge() of the parts of a dataset of named fields (Writer(..., part=(i, n))): every column's
files linked (or copied) in part order, each column's sample table written anew, the manifest last."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

from ..integrity import atomic_write_bytes, fsync_path
from ..manifest import SHARDS_DIR, SKIPPED_NAME, Manifest
from ..writing.writer_finish import field_files, write_tables
from .merging import place_file


def merge_field_parts(ordered: List[Tuple[str, Manifest]], dst: str, started: float) -> Dict[str, Any]:
    """Write DST from the parts (checked by merge, in part order); the MergeReport's fields."""
    path = Path(dst)
    records: List[Dict[str, Any]] = []
    skipped: List[bytes] = []
    linked = copied = 0
    for part_dir, manifest in ordered:
        assert manifest.fields is not None
        for shard in range(len(manifest.shards)):
            shard_files = {}
            for column, table in manifest.fields.columns.items():
                entry = table[shard]
                if place_file(Path(part_dir) / entry.path, path / entry.path, entry.size):
                    linked += 1
                else:
                    copied += 1
                shard_files[column] = {"path": entry.path, "size": entry.size, "sha256": entry.sha256}
            records.append({"num_samples": int(manifest.shards.num_samples[shard]), "files": shard_files})
        lines = Path(part_dir) / SKIPPED_NAME
        skipped.extend(lines.read_bytes().splitlines(keepends=True) if lines.is_file() else [])
    fsync_path(path / SHARDS_DIR)
    base = ordered[0][1]
    assert base.fields is not None
    files = field_files(records, list(base.fields.columns))
    manifests = [manifest for _, manifest in ordered]
    summary = {**base.source.get("summary", {}),
               "converted": sum(int(m.source.get("summary", {}).get("converted", 0)) for m in manifests),
               "skipped": len(skipped)}
    assert base.part is not None
    merged = dataclasses.replace(base, shards=files.units(), fields=files, part=None,
                                 source={**base.source, "summary": summary,
                                         "fingerprint": base.part["plan_fingerprint"]})
    atomic_write_bytes(path / SKIPPED_NAME, b"".join(skipped))
    write_tables(dst, merged)
    merged.save(dst)
    return {"dst": dst, "parts": len(ordered), "num_samples": merged.num_samples, "num_shards": len(records),
            "linked": linked, "copied": copied, "seconds": time.monotonic() - started}
