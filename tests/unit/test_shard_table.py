"""The manifest's shard table: the column fast path reads exactly what the entry-by-entry path
reads, and the manifest checksum it builds is json.dumps' canonical text, byte for byte."""
from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from shardkit.errors import ManifestError
from shardkit.manifest import Manifest, _body_checksum
from shardkit.schema import SampleSchema
from shardkit.shard_table import ShardEntry, ShardTable, canonical_text, plain_columns


def _entries(count: int) -> List[Dict[str, Any]]:
    return [{"path": f"shards/shard-{n:05d}.h5", "num_samples": 3 + n % 2, "first_index": 0, "size": 1000 + n,
             "sha256": f"{n:064x}"} for n in range(count)]


def _contiguous(entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    first = 0
    for entry in entries:
        entry["first_index"] = first
        first += entry["num_samples"]
    return entries


def test_canonical_text_is_json_dumps() -> None:
    entries = _contiguous(_entries(50))
    entries[7]["path"] = "shards/sh\u00e9rd \"7\".h5"      # escaped exactly as json.dumps does
    columns = plain_columns(entries)
    assert columns is not None
    assert canonical_text(columns) == json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def test_checksum_is_the_same_on_both_paths() -> None:
    body = {"b": {"z": 1, "a": [1.5, None, "x"]}, "shards": _contiguous(_entries(5)), "a": "\u00e9", "zz": True}
    assert _body_checksum(body, plain_columns(body["shards"])) == _body_checksum(body)


@pytest.mark.parametrize("change", [{"size": 2 ** 63}, {"path": "shards/sub/x.h5"}, {"extra": 1}])
def test_unusual_entries_take_the_entry_path_and_read_the_same(change: Dict[str, Any]) -> None:
    entries = _contiguous(_entries(4))
    entries[2].update(change)
    assert plain_columns(entries) is None
    if change.get("size") == 2 ** 63:
        with pytest.raises(ManifestError, match="2\\*\\*63"):
            ShardTable.from_dicts(entries)
        return
    table = ShardTable.from_dicts(entries)
    assert list(table) == [ShardEntry.from_dict(entry) for entry in entries]


@pytest.mark.parametrize("path", ["shards/../x.h5", "/etc/passwd", "shards/..", "shards/.", "shards\\x.h5",
                                  "other/x.h5", "shards/a:b", "shards/a\0.h5", "shards/" + "a" * 4090])
def test_unsafe_paths_are_refused(path: str) -> None:
    entries = _contiguous(_entries(3))
    entries[1]["path"] = path
    with pytest.raises(ManifestError, match="unsafe shard path"):
        ShardTable.from_dicts(entries)


@pytest.mark.parametrize("field", ["num_samples", "first_index", "size"])
@pytest.mark.parametrize("value", ["1", 1.9, True, 1.0])
def test_counts_and_sizes_are_json_integers_only(field: str, value: Any) -> None:
    """Mutation: ShardEntry.from_dict taking int(value) again (so "1", 1.9 and true read as counts)."""
    entries = _contiguous(_entries(3))
    entries[1][field] = value
    with pytest.raises(ManifestError, match=f"{field} must be a whole JSON number"):
        ShardTable.from_dicts(entries)


def test_gaps_and_duplicates_are_found() -> None:
    entries = _contiguous(_entries(4))
    entries[2]["first_index"] += 1
    with pytest.raises(ManifestError, match="starts at index"):
        ShardTable.from_dicts(entries).check_consistency("m")
    entries = _contiguous(_entries(4))
    entries[3]["path"] = entries[1]["path"]
    with pytest.raises(ManifestError, match="listed twice"):
        ShardTable.from_dicts(entries).check_consistency("m")


def test_manifest_round_trips_through_the_table() -> None:
    entries = [ShardEntry.from_dict(entry) for entry in _contiguous(_entries(6))]
    manifest = Manifest("hdf5", 2, SampleSchema(kind="image"), entries)
    assert isinstance(manifest.shards, ShardTable) and list(manifest.shards) == entries
    assert manifest.num_samples == sum(entry.num_samples for entry in entries)
    again = Manifest.from_dict(json.loads(json.dumps(manifest.to_dict())))
    assert again.shards == manifest.shards and again.to_dict() == manifest.to_dict()
    manifest.shards = entries[:2]       # assigning a list keeps the table
    assert isinstance(manifest.shards, ShardTable) and manifest.shards[1] == entries[1]
