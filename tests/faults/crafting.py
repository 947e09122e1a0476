"""Crafted (malicious or badly broken) shards, written with the raw libraries from each
format's documented layout, and manifests resealed to match them.

A crafter takes a valid shard file and a case name and rewrites the file in place so that it
still looks like a shard of its format but lies about its offsets, lengths, counts, types or
version. Formats without a crafter here are covered by the generic cases only.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Dict

import numpy as np

#: case -> what the reader's error message must mention (regex, case-insensitive)
CASES = {
    "negative_offset": "offset|negative",
    "overlapping_offsets": "offset|overlap|decreas",
    "offset_past_end": "offset|end|past|data",
    "huge_length": "claims|bytes|stor|offset|length",
    "huge_count": "claims|rows|count|bytes|stor",
    "count_mismatch": "rows|count|expected",
    "wrong_dtype": "type|dtype|uint8",
    "object_labels": "type|dtype|label",
    "missing_table": "no dataset|missing|crc",
    "newer_version": "newer",
}

#: Claimed sizes far past any machine's memory: allocating them would fail loudly.
HUGE = 1 << 44


def _rewrite_h5(path: Path, change: Callable[..., None]) -> None:
    import h5py
    with h5py.File(path, "r+") as handle:
        change(handle, h5py)


def craft_hdf5(path: Path, case: str) -> None:
    """formats/hdf5.md: /data uint8 (packed payloads), /offsets int64 (N+1), /labels int64 (N),
    /crc32 uint32 (N), attrs format_version."""
    def replace(handle, name: str, data=None, **kwargs) -> None:
        del handle[name]
        handle.create_dataset(name, data=data, **kwargs)

    def change(handle, h5py) -> None:
        offsets = handle["offsets"][()]
        if case == "negative_offset":
            offsets[1] = -8
            handle["offsets"][...] = offsets
        elif case == "overlapping_offsets":
            offsets[1] = offsets[2] + 5
            handle["offsets"][...] = offsets
        elif case == "offset_past_end":
            offsets[-1] = handle["data"].shape[0] + 4096
            handle["offsets"][...] = offsets
        elif case == "huge_length":
            # a sparse chunked /data claiming 16 TiB: only its first chunk exists in the file
            data = handle["data"][()]
            del handle["data"]
            dset = handle.create_dataset("data", shape=(HUGE,), dtype=np.uint8, chunks=(1 << 16,))
            dset[:len(data)] = data
            offsets[-1] = HUGE
            handle["offsets"][...] = offsets
        elif case == "huge_count":
            for name, dtype in (("labels", np.int64), ("crc32", np.uint32)):
                del handle[name]
                handle.create_dataset(name, shape=(HUGE,), dtype=dtype, chunks=(1024,))
            del handle["offsets"]
            handle.create_dataset("offsets", shape=(HUGE + 1,), dtype=np.int64, chunks=(1024,))
        elif case == "count_mismatch":
            replace(handle, "crc32", handle["crc32"][()][:-1])
        elif case == "wrong_dtype":
            replace(handle, "data", handle["data"][()].astype(np.float64))
        elif case == "object_labels":
            labels = [str(v).encode() for v in handle["labels"][()]]
            replace(handle, "labels", labels, dtype=h5py.string_dtype())
        elif case == "missing_table":
            del handle["crc32"]
        elif case == "newer_version":
            handle.attrs["format_version"] = 99
        else:
            raise KeyError(case)

    _rewrite_h5(path, change)


CRAFTERS: Dict[str, Callable[[Path, str], None]] = {"hdf5": craft_hdf5}


def reseal(dst: Path) -> None:
    """Make manifest.json agree with the shard files as they now are (sizes, sha256, its own
    checksum), as an attacker who rewrites a dataset would: only the shard defences remain."""
    from shardkit.manifest import Manifest, ShardEntry
    path = dst / "manifest.json"
    data = json.loads(path.read_text())
    manifest = Manifest.from_dict(data)
    entries = []
    for entry in manifest.shards:
        file = dst / entry.path
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        entries.append(ShardEntry(entry.path, entry.num_samples, entry.first_index, file.stat().st_size, digest))
    manifest.shards = entries
    manifest.save(dst)


def forge_manifest(dst: Path, edit: Callable[[dict], None]) -> None:
    """Edit manifest.json's content and recompute its self-checksum (a deliberate forgery)."""
    from shardkit.manifest import _body_checksum
    path = dst / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    body = {key: value for key, value in data.items() if key != "manifest_sha256"}
    data["manifest_sha256"] = _body_checksum(body)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
