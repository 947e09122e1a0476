"""Sizes, parts, the plan, records and the manifest: laws and refusals."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.errors import ManifestError, NotADatasetError, UsageError
from shardkit.manifest import Manifest, ShardEntry, check_relative_path, load_manifest
from shardkit.writing.plan import cut_shards, make_tasks
from shardkit.records import Encoded, payload_crc32
from shardkit.schema import SampleSchema
from shardkit.units import parse_part, parse_size


@pytest.mark.parametrize("text, expected", [
    ("256MB", 256 * 10**6), ("1GiB", 2**30), ("1.5 KB", 1500), ("512kib", 512 * 1024), ("1000", 1000), (7, 7)])
def test_parse_size(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "-1MB", "0", "12 parsecs", "1e3MB"])
def test_parse_size_refuses(text) -> None:
    with pytest.raises(UsageError):
        parse_size(text)


def test_parse_part() -> None:
    assert parse_part("0/4") == (0, 4) and parse_part(" 3 / 4 ") == (3, 4)
    for bad in ("4/4", "-1/2", "1/0", "a/b", "1"):
        with pytest.raises(UsageError):
            parse_part(bad)


sizes_strategy = st.lists(st.integers(min_value=0, max_value=5000), max_size=200)


@settings(max_examples=100, deadline=None)
@given(sizes=sizes_strategy, max_bytes=st.one_of(st.none(), st.integers(1, 20000)),
       max_items=st.one_of(st.none(), st.integers(1, 50)))
def test_cut_shards_laws(sizes, max_bytes, max_items) -> None:
    ranges = cut_shards(np.array(sizes, dtype=np.int64), max_bytes, max_items)
    # contiguous cover of every item, in order, no empty range
    assert [start for start, _ in ranges] == ([0] if ranges else []) + [stop for _, stop in ranges[:-1]]
    assert (ranges[-1][1] if ranges else 0) == len(sizes)
    for start, stop in ranges:
        assert stop > start
        if max_items:
            assert stop - start <= max_items
        if max_bytes is not None and stop - start > 1:
            assert sum(sizes[start:stop]) <= max_bytes


@settings(max_examples=50, deadline=None)
@given(num=st.integers(0, 60), parts=st.integers(1, 8))
def test_parts_partition_the_shards(num, parts) -> None:
    ranges = [(i, i + 1) for i in range(num)]
    chosen = [task.shard for index in range(parts) for task in make_tasks(ranges, (index, parts))]
    assert chosen == list(range(num))


def test_encoded_crc() -> None:
    sample = Encoded.make(b"hello", 3)
    assert sample.crc_ok() and sample.label == 3 and sample.nbytes == 5
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert payload_crc32(array) == payload_crc32(array.tobytes())
    assert not Encoded(b"hellp", 3, sample.crc32).crc_ok()


def _manifest() -> Manifest:
    return Manifest(format_name="hdf5", format_version=1, schema=SampleSchema(kind="image"),
                    shards=[ShardEntry("shards/shard-00000.h5", 10, 0, 1000, "ab" * 32),
                            ShardEntry("shards/shard-00001.h5", 5, 10, 500, "cd" * 32)],
                    classes=["a", "b"], created="2026-01-01T00:00:00+00:00")


def test_manifest_round_trip(tmp_path) -> None:
    manifest = _manifest()
    manifest.save(tmp_path)
    loaded = load_manifest(tmp_path)
    assert loaded.to_dict() == manifest.to_dict()
    assert loaded.num_samples == 15 and loaded.total_bytes == 1500


def _rewrite(tmp_path, change) -> None:
    data = _manifest().to_dict()
    change(data)
    body = {k: v for k, v in data.items() if k != "manifest_sha256"}
    from shardkit.manifest import _body_checksum
    data["manifest_sha256"] = _body_checksum(body)
    (tmp_path / "manifest.json").write_text(json.dumps(data))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(manifest_version=99), "newer than this shardkit reads"),
    (lambda d: d.update(manifest_version=0), "manifest_version 0 is invalid"),
    (lambda d: d.update(manifest_version=-1), "manifest_version -1 is invalid"),
    (lambda d: d.update(manifest_version="1"), "must be a whole number, not str '1'"),
    (lambda d: d.update(manifest_version=True), "must be a whole number, not bool"),
    (lambda d: d.pop("manifest_version"), "missing manifest_version"),
    (lambda d: d["shards"][0].update(path="../../etc/passwd"), "unsafe shard path"),
    (lambda d: d["shards"][0].update(path="/etc/passwd"), "unsafe shard path"),
    (lambda d: d["shards"][1].update(first_index=3), "expected 10"),
    (lambda d: d["shards"][1].update(path="shards/shard-00000.h5"), "listed twice"),
    (lambda d: d["shards"][0].pop("sha256"), "malformed"),
    (lambda d: d.pop("schema"), "malformed"),
])
def test_manifest_refusals(tmp_path, change, message) -> None:
    _rewrite(tmp_path, change)
    with pytest.raises(ManifestError, match=message):
        load_manifest(tmp_path)


def test_manifest_tampering_and_absence(tmp_path) -> None:
    with pytest.raises(NotADatasetError):
        load_manifest(tmp_path)
    _manifest().save(tmp_path)
    text = (tmp_path / "manifest.json").read_text().replace('"a"', '"z"')
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ManifestError, match="edited or damaged"):
        load_manifest(tmp_path)
    _manifest().save(tmp_path)
    data = json.loads((tmp_path / "manifest.json").read_text())
    (tmp_path / "manifest.json").write_text(json.dumps(data, indent=7, sort_keys=False))  # re-indented: fine
    assert load_manifest(tmp_path).num_samples == _manifest().num_samples
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path)


@pytest.mark.parametrize("path", ["shards/../x", "shards\\x.h5", "C:/x", "other/x.h5", "shards//x.h5", ""])
def test_unsafe_paths(path) -> None:
    with pytest.raises(ManifestError):
        check_relative_path(path)
