"""Crafted (malicious or badly broken) shards, written with the raw libraries from each
format's documented layout, and manifests resealed to match them.

A crafter takes a valid shard file and a case name and rewrites the file in place so that it
still looks like a shard of its format but lies about its offsets, lengths, counts, types or
version, or carries a pickle that would run code. Crafters for formats that are not registered
are simply unused; a registered format without one is covered by the generic cases only.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import numpy as np

#: Every crafted case. A crafter returns the pattern (regex, case-insensitive) the reader's error
#: must match, or None when the case cannot be expressed in its format's layout.
CASES = ("negative_offset", "overlapping_offsets", "offset_past_end", "huge_length", "huge_count",
         "count_mismatch", "wrong_dtype", "object_labels", "missing_table", "newer_version", "pickled_code")

#: File whose existence would prove that reading a shard ran code planted in it.
PWNED = Path("/tmp/shardkit-crafted-shard-ran-code")

#: Claimed sizes far past any machine's memory: allocating them would fail loudly.
HUGE = 1 << 44


def _rewrite_h5(path: Path, change: Callable[..., None]) -> None:
    import h5py
    with h5py.File(path, "r+") as handle:
        change(handle, h5py)


def craft_hdf5(path: Path, case: str) -> Optional[str]:
    """formats/hdf5.md: /data uint8 (packed payloads), /offsets int64 (N+1), /labels int64 (N),
    /crc32 uint32 (N), attrs format_version."""
    expected = {"negative_offset": "offset", "overlapping_offsets": "overlap", "offset_past_end": "offsets end",
                "huge_length": "claims", "huge_count": "claims", "count_mismatch": "rows",
                "wrong_dtype": "type", "object_labels": "type", "missing_table": "no dataset /crc32",
                "newer_version": "newer"}
    if case not in expected:
        return None

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
    return expected[case]


def craft_lmdb(path: Path, case: str) -> Optional[str]:
    """formats/lmdb.md: keys i.to_bytes(8, "big") -> 32-byte header "<2sBBIqQQ" (magic, version,
    flags, crc32, label, raw length, stored length) + payload; b"__labels__" (int64 LE x N);
    b"__meta__" (JSON: format_version, layout, dtype, shape, compression, num_samples)."""
    import json as _json
    import struct

    import lmdb
    header = struct.Struct("<2sBBIqQQ")
    env = lmdb.open(str(path), subdir=False, lock=False, map_size=64 << 20)
    try:
        with env.begin(write=True) as txn:
            count = _json.loads(bytes(txn.get(b"__meta__")))["num_samples"]

            def record(index: int, **fields: int) -> None:
                value = bytes(txn.get(index.to_bytes(8, "big")))
                parts = dict(zip(("magic", "version", "flags", "crc", "label", "raw", "stored"),
                                 header.unpack_from(value)))
                parts.update(fields)
                txn.put(index.to_bytes(8, "big"), header.pack(*parts.values()) + value[header.size:])

            def meta(**fields: object) -> None:
                data = _json.loads(bytes(txn.get(b"__meta__")))
                data.update(fields)
                txn.put(b"__meta__", _json.dumps(data, sort_keys=True, separators=(",", ":")).encode())

            if case == "negative_offset":
                record(1, stored=(1 << 64) - 8)          # -8 as the unsigned field holds it
                return "header does not match"
            if case == "offset_past_end":
                record(1, stored=len(txn.get((1).to_bytes(8, "big"))) + 4096)
                return "header does not match"
            if case == "huge_length":
                record(1, flags=1, raw=HUGE)
                return "cannot hold"
            if case == "huge_count":
                meta(num_samples=HUGE)
                return "entries for"
            if case == "count_mismatch":
                txn.delete((count - 1).to_bytes(8, "big"))
                return "entries for"
            if case == "wrong_dtype":
                meta(layout="array", dtype="float64", shape=[3])
                return "metadata layout"
            if case == "object_labels":
                txn.put(b"__labels__", _json.dumps([str(i) for i in range(count)]).encode())
                return "label table"
            if case == "missing_table":
                txn.delete(b"__labels__")
                return "entries for"
            if case == "newer_version":
                meta(format_version=99)
                return "format version 99"
            return None
    finally:
        env.sync(True)
        env.close()


class _RunsCode:
    """Unpickling this would create PWNED: a pickle that runs code, as an attacker plants it."""

    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return (open, (str(PWNED), "w"))


def craft_pt(path: Path, case: str) -> Optional[str]:
    """formats/pt.md: a torch.save dict with shardkit_format, format_version, layout, dtype, shape,
    compression, num_samples and tensors data (uint8), offsets (int64, N+1), raw_lengths, labels
    and crc32 (int64, N)."""
    import torch
    shard = torch.load(path, map_location="cpu", weights_only=True)
    offsets = shard["offsets"].clone()
    if case == "negative_offset":
        offsets[1] = -8
        expected = "offsets"
    elif case == "overlapping_offsets":
        offsets[1] = offsets[2] + 5
        expected = "offsets"
    elif case == "offset_past_end":
        offsets[-1] = len(shard["data"]) + 4096
        expected = "offsets"
    elif case == "huge_length":
        shard["raw_lengths"] = shard["raw_lengths"].clone()
        shard["raw_lengths"][0] = HUGE
        expected = "raw lengths differ"
    elif case == "huge_count":
        shard["num_samples"] = HUGE
        expected = "lengths do not match"
    elif case == "count_mismatch":
        shard["crc32"] = shard["crc32"][:-1].clone()
        expected = "lengths do not match"
    elif case == "wrong_dtype":
        shard["data"] = shard["data"].to(torch.float64)
        expected = "data is not"
    elif case == "object_labels":
        shard["labels"] = [str(v) for v in shard["labels"].tolist()]
        expected = "labels is not"
    elif case == "missing_table":
        del shard["crc32"]
        expected = "crc32"
    elif case == "newer_version":
        shard["format_version"] = 99
        expected = "format version 99"
    elif case == "pickled_code":
        shard["shardkit_format"] = _RunsCode()
        expected = "not a readable .pt shard"
    else:
        return None
    shard["offsets"] = offsets
    with open(path, "wb") as handle:
        torch.save(shard, handle)
    return expected


CRAFTERS: Dict[str, Callable[[Path, str], Optional[str]]] = {
    "hdf5": craft_hdf5, "lmdb": craft_lmdb, "pt": craft_pt}


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
    manifest.sample_table = _resealed_table(dst, manifest)
    manifest.save(dst)


def _resealed_table(dst: Path, manifest: Any) -> Optional[dict]:
    """The sample table rewritten from the shards as they now are; where a crafted shard no longer
    opens, none at all (the attacker drops it, so readers have only the shards to go by)."""
    from shardkit.errors import CorruptShardError
    from shardkit.sample_table import TABLE_NAME
    from shardkit.writing.table_writer import write_sample_table
    if manifest.sample_table is None:       # it had none (LMDB image records): opening no shard here
        return None
    try:
        return write_sample_table(str(dst), manifest)
    except CorruptShardError:
        (dst / TABLE_NAME).unlink(missing_ok=True)
        return None


def forge_manifest(dst: Path, edit: Callable[[dict], None]) -> None:
    """Edit manifest.json's content and recompute its self-checksum (a deliberate forgery)."""
    from shardkit.manifest import _body_checksum
    path = dst / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    body = {key: value for key, value in data.items() if key != "manifest_sha256"}
    data["manifest_sha256"] = _body_checksum(body)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
