"""A shardkit dataset as SRC: re-shard or change format without the raw tree, keeping every record."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.cli import main
from shardkit.options import ReshardOptions, RunOptions
from shardkit.formats import format_names
from shardkit.manifest import Manifest, ShardEntry
from shardkit.writing.plan import cut_shards
from shardkit.schema import SampleSchema
from shardkit.sources.shard_dataset import ShardDatasetSource


def _records(dst: Path) -> list:
    ds = shardkit.open_dataset(dst, decode=None)
    return [(bytes(memoryview(e.payload)), e.label, e.crc32, ds.key(index))
            for index, e in enumerate(map(ds.read_encoded, range(len(ds))))]


def _shard_bytes(dst: Path) -> list:
    manifest = json.loads((dst / "manifest.json").read_text())
    return [(dst / entry["path"]).read_bytes() for entry in manifest["shards"]]


def _after_userblock(data: bytes) -> bytes:
    """An HDF5 shard's bytes after its userblock: the locator there (format version 3) holds CRC32s
    of bytes that include the dataset identity, so only the HDF5 part can match once ids are swapped."""
    return data[int.from_bytes(data[16:24], "little"):]


def load_id(dst: Path) -> bytes:
    return json.loads((dst / "manifest.json").read_text())["dataset_id"].encode()


def test_hdf5_lmdb_pt_hdf5_round_trip_is_identical(image_tree: Path, tmp_path: Path) -> None:
    first = tmp_path / "first"
    shardkit.convert(str(image_tree), str(first), format="hdf5", samples_per_shard=16, quiet=True)
    shardkit.convert(str(first), str(tmp_path / "lmdb"), format="lmdb", samples_per_shard=50, quiet=True)
    shardkit.convert(str(tmp_path / "lmdb"), str(tmp_path / "pt"), format="pt", shard_size="1MB",
                     compression="gzip", quiet=True)
    shardkit.convert(str(tmp_path / "pt"), str(tmp_path / "back"), format="hdf5", samples_per_shard=16, quiet=True)
    assert _records(tmp_path / "back") == _records(first)
    # Same plan: byte-identical shards, but for the identity each dataset stamps into its shards.
    first_id, back_id = (load_id(dst) for dst in (first, tmp_path / "back"))
    assert first_id != back_id
    assert [_after_userblock(data).replace(back_id, first_id) for data in _shard_bytes(tmp_path / "back")] == \
        [_after_userblock(data) for data in _shard_bytes(first)]
    assert [len(data) for data in _shard_bytes(tmp_path / "back")] == [len(data) for data in _shard_bytes(first)]
    assert all(first_id in data for data in _shard_bytes(first))
    back = shardkit.open_dataset(tmp_path / "back")
    assert back.classes == ["circle", "square", "stripes", "triangle"]
    assert back.manifest.source["kind"] == "shardkit_dataset"
    assert back.manifest.source["summary"]["source_format"] == "pt"
    assert shardkit.verify(str(tmp_path / "back"), mode="deep").ok


def test_every_format_converts_to_every_format(dataset_dir: Path, tmp_path: Path) -> None:
    expected = _records(dataset_dir)
    for target in format_names():
        dst = tmp_path / target
        report = shardkit.convert(str(dataset_dir), str(dst), format=target, samples_per_shard=37, quiet=True)
        assert (report.num_samples, report.num_shards, report.skipped) == (120, 4, 0)
        assert _records(dst) == expected


def test_cli_changes_format_and_verify_passes(dataset_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    dst = tmp_path / "new"
    result = runner.invoke(main, ["convert", str(dataset_dir), str(dst), "--format", "lmdb", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "wrote 120 samples in 1 lmdb shards" in result.output
    assert runner.invoke(main, ["verify", str(dst), "--deep"]).exit_code == 0
    result = runner.invoke(main, ["convert", str(dataset_dir), str(tmp_path / "x"), "--resize", "64"])
    assert result.exit_code == 2 and "--resize does not apply to a shardkit dataset" in result.output
    assert result.output.count("\n") == 1
    result = runner.invoke(main, ["convert", str(dst), str(dst), "--format", "pt", "--overwrite"])
    assert result.exit_code == 2 and "DST is SRC" in result.output
    assert shardkit.verify(str(dst)).ok


@pytest.mark.parametrize("fmt", ["lmdb"])      # one source format is enough: spawned workers are slow
def test_parallel_reshard_is_byte_identical(dataset_dir: Path, tmp_path: Path) -> None:
    one = tmp_path / "one"
    two = tmp_path / "two"
    shardkit.convert(str(dataset_dir), str(one), format="pt", samples_per_shard=25, quiet=True)
    shardkit.convert(str(dataset_dir), str(two), format="pt", samples_per_shard=25, workers=2, quiet=True)
    assert _shard_bytes(one) == _shard_bytes(two)


def _flip_payload_byte(dst: Path, index: int) -> str:
    """Flip one byte inside sample index's stored payload; return its shard's relative path."""
    ds = shardkit.open_dataset(dst, decode=None)
    shard, local = ds.locate(index)
    payload = bytes(memoryview(ds.read_encoded(index).payload))
    rel = ds.manifest.shards[shard].path
    data = bytearray((dst / rel).read_bytes())
    offset = data.find(payload) + len(payload) // 2
    data[offset] ^= 0x10
    ds.close()                     # let go of the file before changing it
    (dst / rel).write_bytes(bytes(data))
    return rel


def test_a_sample_failing_its_crc_is_skipped_and_listed(writable_dataset: Path, tmp_path: Path) -> None:
    rel = _flip_payload_byte(writable_dataset, 21)
    dst = tmp_path / "out"
    report = shardkit.convert(str(writable_dataset), str(dst), format="pt", samples_per_shard=50, quiet=True)
    assert (report.num_samples, report.skipped) == (119, 1)
    skipped = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    assert skipped == [{"path": rel, "reason": "sample 5 (index 21) fails its CRC32 check"}]
    assert shardkit.verify(str(dst), mode="deep").ok
    with pytest.raises(shardkit.ConversionError, match="index 21"):
        shardkit.convert(str(writable_dataset), str(tmp_path / "strict"), format="pt", on_error="fail", quiet=True)
    assert not (tmp_path / "strict" / "manifest.json").exists()


def test_a_missing_source_shard_stops_the_run(writable_dataset: Path, tmp_path: Path) -> None:
    (writable_dataset / "shards" / sorted(os.listdir(writable_dataset / "shards"))[3]).unlink()
    with pytest.raises(shardkit.CorruptShardError, match="source shard 3 is missing"):
        shardkit.convert(str(writable_dataset), str(tmp_path / "out"), format="lmdb", quiet=True)
    assert not (tmp_path / "out" / "manifest.json").exists()


def _mapped(prefix: str) -> set:
    with open("/proc/self/maps") as handle:
        return {line.split()[-1] for line in handle if line.rstrip().split()[-1].startswith(prefix)}


def test_source_shards_are_read_one_at_a_time(writable_dataset: Path) -> None:
    source = ShardDatasetSource.open(str(writable_dataset), ReshardOptions(), RunOptions())
    prefix = str(writable_dataset / "shards")
    most = 0
    count = 0
    for outcome in source.encode_range(0, 120):
        count += 1
        most = max(most, len(_mapped(prefix)))
    assert count == 120 and most <= 1
    assert not _mapped(prefix)


def _source(counts: list, sizes: list) -> ShardDatasetSource:
    shards = []
    first = 0
    for number, (count, size) in enumerate(zip(counts, sizes)):
        shards.append(ShardEntry(f"shards/shard-{number:05d}.h5", count, first, size * count, "0" * 64))
        first += count
    return ShardDatasetSource("/nowhere", Manifest("hdf5", 1, SampleSchema(kind="image"), shards))


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(st.integers(0, 30), max_size=8), sizes=st.lists(st.integers(1, 5000), min_size=8, max_size=8),
       max_bytes=st.one_of(st.none(), st.integers(1, 40000)), max_items=st.one_of(st.none(), st.integers(1, 40)))
def test_plan_matches_cut_shards_over_average_sizes(counts, sizes, max_bytes, max_items) -> None:
    if max_bytes is None and max_items is None:
        max_items = 10
    source = _source(counts, sizes)
    assert source.plan_ranges(max_bytes, max_items) == cut_shards(source.item_sizes(), max_bytes, max_items)


def test_options_for_raw_inputs_are_refused(dataset_dir: Path, tmp_path: Path) -> None:
    for kwargs, flag in (({"image_mode": "jpeg"}, "--image-mode"), ({"no_labels": True}, "--no-labels"),
                         ({"labels": "x.csv"}, "--labels")):
        with pytest.raises(shardkit.UsageError, match=f"{flag} does not apply"):
            shardkit.convert(str(dataset_dir), str(tmp_path / "out"), format="pt", **kwargs)
    assert not (tmp_path / "out").exists()


def test_a_csv_dataset_reshards_with_its_columns(tmp_path: Path) -> None:
    src = tmp_path / "rows.csv"
    src.write_text("x,y,name,label\n1.5,2,foo,cat\n3,,bar,dog\n4.25,7,foo,cat\n-1,0.5,bar,dog\n")
    first = tmp_path / "lmdb"
    shardkit.convert(str(src), str(first), format="lmdb", label_column="label", compression="gzip", quiet=True)
    again = tmp_path / "pt"
    shardkit.convert(str(first), str(again), format="pt", samples_per_shard=3, quiet=True)
    old, new = shardkit.open_dataset(first, decode=None), shardkit.open_dataset(again, decode=None)
    assert new.schema.columns == old.schema.columns and new.classes == old.classes == ["cat", "dog"]
    assert new.schema.compression == "none" and len(new.manifest.shards) == 2
    for index in range(len(old)):
        (a, label_a), (b, label_b) = old[index], new[index]
        assert a.tobytes() == b.tobytes() and label_a == label_b
