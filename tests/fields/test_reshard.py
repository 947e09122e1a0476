"""A dataset of named fields as SRC of convert: re-sharded into any format, shard size, order or
compression, or copied filtered (--keys, --fraction, --classes), every stored value copied as it
is, a damaged one skipped and listed, a killed copy resumed to the same bytes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main as cli
from shardkit.runtime.fault_points import KILL_AT

from .conftest import ALL_FIELDS, make_samples

COUNT = 40


@pytest.fixture
def dataset(tmp_path: Path, source_date: None) -> Path:
    """40 samples of every field type, shuffled, in HDF5 shards of 7."""
    src = tmp_path / "src"
    shardkit.write(make_samples(COUNT), src, ALL_FIELDS, samples_per_shard=7)
    return src


def stored(root: Path) -> List[Dict[str, Any]]:
    """Every sample's key and, per column, its stored bytes, presence and CRC32, in index order."""
    ds = shardkit.open_dataset(root, decode=None)
    out = []
    for index in range(len(ds)):
        record = ds.read_encoded(index)
        values = {column: (bytes(np.ascontiguousarray(one.payload).tobytes() if isinstance(one.payload, np.ndarray)
                                 else one.payload), one.label, one.crc32) for column, one in record.items()}
        out.append({"key": ds.key(index), **values})
    ds.close()
    return out


def files_of(root: Path) -> Dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def manifest(root: Path) -> Dict[str, Any]:
    return json.loads((root / "manifest.json").read_text())


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb", "pt"])
def test_a_reshard_copies_every_stored_value_and_key(dataset: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / fmt
    report = shardkit.convert(dataset, dst, format=fmt, samples_per_shard=16)
    assert report.num_samples == COUNT and report.num_shards == 3
    assert stored(dst) == stored(dataset)
    assert shardkit.verify(str(dst), mode="deep").ok
    body = manifest(dst)
    assert body["format"]["name"] == fmt and body["schema"] == manifest(dataset)["schema"]
    assert body["source"]["kind"] == "shardkit_dataset" and body["source"]["summary"]["source_samples"] == COUNT
    # decoded reads agree too (images, JSON, variable arrays, absent optional fields)
    old, new = shardkit.open_dataset(dataset, decode="numpy"), shardkit.open_dataset(dst, decode="numpy")
    for index in (0, 5, 39):
        a, b = old[index], new[index]
        for name in a:
            assert (a[name] is None and b[name] is None) or np.array_equal(np.asarray(a[name]), np.asarray(b[name]))


def test_a_shuffled_copy_is_the_seeded_permutation_and_the_same_twice(dataset: Path, tmp_path: Path) -> None:
    shardkit.convert(dataset, tmp_path / "a", order="shuffled", seed=5, compression="gzip")
    shardkit.convert(dataset, tmp_path / "b", order="shuffled", seed=5, compression="gzip")
    assert files_of(tmp_path / "a" / "shards") == files_of(tmp_path / "b" / "shards")
    old, new = stored(dataset), stored(tmp_path / "a")
    assert sorted(new, key=lambda s: s["key"]) == sorted(old, key=lambda s: s["key"]) and new != old
    assert all(field.get("compression") == "gzip" for field in manifest(tmp_path / "a")["schema"]["fields"])


def test_a_keys_file_copies_those_samples_in_stored_order(dataset: Path, tmp_path: Path) -> None:
    old = stored(dataset)
    wanted = [old[index]["key"] for index in (30, 3, 17)]
    keys = tmp_path / "keys.txt"
    keys.write_text("\n".join(wanted) + "\n")
    shardkit.convert(dataset, tmp_path / "subset", keys=keys, format="lmdb")
    assert stored(tmp_path / "subset") == [old[3], old[17], old[30]]


def test_classes_keep_and_relabel_a_label_field(dataset: Path, tmp_path: Path) -> None:
    dst = tmp_path / "subset"
    shardkit.convert(dataset, dst, classes=["emu", "cat"])
    old = shardkit.open_dataset(dataset, decode=None, return_key=True)
    names = {old[index]["__key__"]: ("cat", "dog", "emu")[int(old[index]["label"][0])] for index in range(len(old))}
    new = shardkit.open_dataset(dst, decode=None, return_key=True)
    assert new.schema.fields[2].classes == ("cat", "emu")      # the old label order
    got = {new[index]["__key__"]: ("cat", "emu")[int(new[index]["label"][0])] for index in range(len(new))}
    assert got == {key: name for key, name in names.items() if name != "dog"}
    assert shardkit.verify(str(dst), mode="deep").ok                # the relabelled values' CRC32s hold


def test_a_fraction_per_class_is_seeded_and_nested(dataset: Path, tmp_path: Path) -> None:
    half, quarter = tmp_path / "half", tmp_path / "quarter"
    shardkit.convert(dataset, half, fraction=0.5, seed=9)
    shardkit.convert(dataset, quarter, fraction=0.25, seed=9)
    labels = {s["key"]: s["label"][0] for s in stored(dataset)}
    kept = [s["key"] for s in stored(half)]
    per_class = {label: sum(1 for key in kept if labels[key] == label) for label in set(labels.values())}
    whole = {label: sum(1 for value in labels.values() if value == label) for label in per_class}
    assert per_class == {label: int(np.floor(count * 0.5 + 0.5)) for label, count in whole.items()}
    assert set(s["key"] for s in stored(quarter)) < set(kept)


def test_a_damaged_value_is_skipped_and_listed_never_copied(tmp_path: Path, source_date: None) -> None:
    """Mutation: StoredFields reading without verify_checksums copies the damaged caption."""
    src = tmp_path / "src"
    samples = [{"caption": f"caption number {n:04d}", "n": n} for n in range(30)]
    shardkit.write(samples, src, order="source", samples_per_shard=10)
    path = src / "shards" / "shard-00001.caption.h5"
    data = bytearray(path.read_bytes())
    at = bytes(data).index(b"caption number 0013")
    data[at + 3] ^= 0x20
    path.write_bytes(bytes(data))
    report = shardkit.convert(src, tmp_path / "copy", format="pt")
    assert report.num_samples == 29 and report.skipped == 1
    lines = [json.loads(line) for line in (tmp_path / "copy" / "skipped.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["path"].endswith("shard-00001.caption.h5") and "sample 3" in lines[0]["reason"]
    copied = shardkit.open_dataset(tmp_path / "copy")
    assert [copied[index]["n"] for index in range(len(copied))] == [n for n in range(30) if n != 13]


def test_a_killed_copy_resumes_to_the_same_bytes(dataset: Path, tmp_path: Path) -> None:
    """Killed as it closes shard 15 of 20: the shards recorded as committed by then are kept."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    shardkit.convert(dataset, whole, samples_per_shard=2)
    shard = part / "shards" / "shard-00015.caption.h5"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000", KILL_AT: f"shard-written:{shard}:{tmp_path / 'marker'}"}
    code = f"import shardkit; shardkit.convert({str(dataset)!r}, {str(part)!r}, samples_per_shard=2)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr
    assert not (part / "manifest.json").exists()
    recorded = 0
    while (part / ".shardkit" / "done" / f"shard-{recorded:05d}.fields.json").exists():
        recorded += 1
    report = shardkit.convert(dataset, part, samples_per_shard=2, resume=True)
    assert report.shards_reused == recorded < 15
    assert files_of(part) == files_of(whole)


def test_options_that_would_change_values_are_refused_in_one_line(dataset: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["convert", str(dataset), str(tmp_path / "x"), "--image-mode", "raw"])
    assert result.exit_code == 2
    assert result.output.strip() == (f"error: {dataset}: --image-mode does not apply to a dataset of named fields "
                                     "(its values are copied as stored)")
    result = runner.invoke(cli, ["convert", str(dataset), str(tmp_path / "x"), "--classes", "cat",
                                 "--label-field", "count"])
    assert result.exit_code == 2 and "'count' is not a label field of this dataset (its label fields: label)" \
        in result.output and len(result.output.strip().splitlines()) == 1
    result = runner.invoke(cli, ["convert", str(dataset), str(tmp_path / "x"), "--classes", "yak"])
    assert result.exit_code == 2 and "--classes names 'yak'" in result.output
    assert not (tmp_path / "x" / "manifest.json").exists()


def test_classes_need_a_label_field_and_several_need_naming(tmp_path: Path) -> None:
    none, two = tmp_path / "none", tmp_path / "two"
    shardkit.write([{"n": n} for n in range(4)], none)
    pair = {"a": {"type": "label", "classes": ["x", "y"]}, "b": {"type": "label", "classes": ["p", "q"]}}
    shardkit.write([{"a": n % 2, "b": 1 - n % 2} for n in range(8)], two, pair)
    with pytest.raises(shardkit.UsageError, match="--classes needs a dataset with a label field"):
        shardkit.convert(none, tmp_path / "x", classes=["x"])
    with pytest.raises(shardkit.UsageError, match="name the one --classes and --fraction go by with --label-field"):
        shardkit.convert(two, tmp_path / "x", fraction=0.5)
    shardkit.convert(two, tmp_path / "y", classes=["q"], label_field="b", order="source")
    copied = shardkit.open_dataset(tmp_path / "y", decode=None)
    assert len(copied) == 4 and all(int(copied[index]["b"][0]) == 0 for index in range(4))
    assert [int(copied[index]["a"][0]) for index in range(4)] == [0, 0, 0, 0]


@pytest.mark.parametrize("golden, fmt", [("hdf5-v3-fields", "lmdb"), ("lmdb-v2-fields", "pt"),
                                         ("pt-v3-fields", "hdf5")])
def test_the_golden_datasets_of_fields_convert_to_another_format(golden: str, fmt: str, tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[1] / "golden" / golden
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "copy"), "--format", fmt, "--quiet"])
    assert result.exit_code == 0, result.output
    assert stored(tmp_path / "copy") == stored(src)
    assert manifest(tmp_path / "copy")["schema"] == manifest(src)["schema"]
