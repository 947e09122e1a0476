"""Manifest layout 2: a dataset of named fields lists each column's files per shard and each
column's sample table; it round trips, validates against formats/manifest.schema.json, and a
malformed or unsafe one is refused naming the manifest. Layout 1 is read and written as before."""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Dict

import jsonschema
import pytest

import shardkit
from shardkit.errors import ManifestError, UsageError
from shardkit.manifest import Manifest, load_manifest
from shardkit.schema import FieldSpec, SampleSchema

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"caption": "text", "boxes": {"type": "array", "dtype": "float32", "shape": [None, 4]}}


@pytest.fixture
def written(tmp_path: Path) -> Dict[str, Any]:
    import numpy as np
    samples = [{"caption": f"c{n}", "boxes": np.zeros((n % 3, 4), np.float32)} for n in range(9)]
    shardkit.write(samples, tmp_path / "ds", FIELDS, samples_per_shard=4)
    return json.loads((tmp_path / "ds" / "manifest.json").read_text())


def resealed(data: Dict[str, Any]) -> Dict[str, Any]:
    """The manifest with its manifest_sha256 recomputed as formats/manifest.md says."""
    body = {key: value for key, value in data.items() if key != "manifest_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return {**body, "manifest_sha256": hashlib.sha256(text.encode()).hexdigest()}


def test_layout_2_round_trips_and_validates(written: Dict[str, Any], fmt: str, tmp_path: Path) -> None:
    manifest = Manifest.from_dict(written)
    assert manifest.to_dict() == written and written["manifest_version"] == 2
    assert list(manifest.fields.columns) == ["caption", "boxes", "boxes.shape"]
    assert manifest.num_samples == 9 and len(manifest.shards) == 3
    schema = json.loads((REPO / "formats" / "manifest.schema.json").read_text())
    jsonschema.validate(written, schema)
    shardkit.write([{"a": 1}], tmp_path / fmt, format=fmt)
    jsonschema.validate(json.loads((tmp_path / fmt / "manifest.json").read_text()), schema)


def test_datasets_of_one_payload_keep_layout_1() -> None:
    data = json.loads((REPO / "tests" / "golden" / "hdf5-v3" / "manifest.json").read_text())
    assert data["manifest_version"] == 1
    manifest = Manifest.from_dict(data)
    assert manifest.fields is None and manifest.to_dict() == data


def _drop_column(data: Dict[str, Any]) -> None:
    del data["shards"][1]["files"]["boxes.shape"]


def _escape(data: Dict[str, Any]) -> None:
    data["shards"][0]["files"]["caption"]["path"] = "shards/../../etc/passwd"


def _same_file(data: Dict[str, Any]) -> None:
    data["shards"][0]["files"]["boxes"] = dict(data["shards"][0]["files"]["caption"])


def _table_name(data: Dict[str, Any]) -> None:
    data["sample_tables"]["caption"]["path"] = "sample_table.bin"


def _v1_schema(data: Dict[str, Any]) -> None:
    data["schema"] = SampleSchema(kind="image").to_dict()


def _negative(data: Dict[str, Any]) -> None:
    data["shards"][2]["files"]["caption"]["size"] = -1


def _bad_field(data: Dict[str, Any]) -> None:
    data["schema"]["fields"][0]["type"] = "pickle"


def _newer(data: Dict[str, Any]) -> None:
    data["manifest_version"] = 3


@pytest.mark.parametrize("damage", [_drop_column, _escape, _same_file, _table_name, _v1_schema, _negative,
                                    _bad_field, _newer])
def test_a_malformed_layout_2_is_refused(written: Dict[str, Any], tmp_path: Path,
                                         damage: Callable[[Dict[str, Any]], None]) -> None:
    data = copy.deepcopy(written)
    damage(data)
    dst = tmp_path / "ds"
    (dst / "manifest.json").write_text(json.dumps(resealed(data)))
    with pytest.raises(ManifestError) as caught:
        load_manifest(dst)
    assert str(dst / "manifest.json") in str(caught.value)


def test_field_specs_check_what_they_hold() -> None:
    assert FieldSpec.from_dict(FieldSpec("b", "array", dtype="f4", shape=[None, 4]).to_dict()).dtype == "float32"
    for bad in ({"name": "a.b", "type": "text"}, {"name": "a", "type": "pickle"},
                {"name": "a", "type": "label"}, {"name": "a", "type": "array", "dtype": "float32"},
                {"name": "a", "type": "array", "dtype": "object", "shape": [2]},
                {"name": "a", "type": "array", "dtype": "float32", "shape": [0]},
                {"name": "a", "type": "text", "mode": "jpeg"}, {"name": "a", "type": "text", "colour": 1},
                {"name": "a", "type": "label", "classes": ["x", "x"]}):
        with pytest.raises(UsageError):
            FieldSpec.from_dict(bad)
    with pytest.raises(UsageError, match="twice"):
        SampleSchema.of_fields([FieldSpec("a", "text"), FieldSpec("a", "int")])


def _claims_many(data: Dict[str, Any]) -> None:
    """The last shard claims 400 million samples; the totals and table sizes resealed to match."""
    data["shards"][-1]["num_samples"] = 400_000_000
    data["num_samples"] = sum(shard["num_samples"] for shard in data["shards"])
    for entry in data["sample_tables"].values():
        entry["size"] = 12 * data["num_samples"]


def _claims_what_only_all_files_hold(data: Dict[str, Any]) -> None:
    """The last shard claims as many samples as its files' sizes together hold at 12 bytes a
    sample: more than any one field's file holds, and each is an ordinary shard."""
    last = data["shards"][-1]
    last["num_samples"] = sum(item["size"] for item in last["files"].values()) // 12
    data["num_samples"] = sum(shard["num_samples"] for shard in data["shards"])
    for entry in data["sample_tables"].values():
        entry["size"] = 12 * data["num_samples"]


def _nul_path(data: Dict[str, Any]) -> None:
    data["shards"][0]["files"]["boxes"]["path"] = "shards/shard-00000.boxes.h5\0.x"


def _long_class(data: Dict[str, Any]) -> None:
    data["classes"] = ["x" * ((1 << 16) + 1)]


@pytest.mark.parametrize("damage, reason", [(_claims_many, "claims 400000000 samples in"),
                                            (_claims_what_only_all_files_hold, r"claims \d+ samples in"),
                                            (_nul_path, "unsafe shard path"),
                                            (_long_class, "class name is longer than")])
def test_layout_2_claims_are_bounded_as_layout_1s_are(written: Dict[str, Any], tmp_path: Path,
                                                      damage: Callable[[Dict[str, Any]], None], reason: str) -> None:
    """What a layout-1 manifest may claim is bounded the same way in each field's files, before
    anything is allocated from it. Mutation: Manifest.check_consistency leaving out the columns."""
    data = copy.deepcopy(written)
    damage(data)
    dst = tmp_path / "ds"
    (dst / "manifest.json").write_text(json.dumps(resealed(data)))
    with pytest.raises(ManifestError, match=reason) as caught:
        shardkit.open_dataset(dst)
    assert str(caught.value).startswith(str(dst / "manifest.json"))


def test_too_many_shards_of_fields_are_refused_before_any_is_parsed(
        written: Dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shard-count bound (lowered to 2 here) holds for layout 2's shard list too."""
    import shardkit.shard_table
    monkeypatch.setattr(shardkit.shard_table, "MAX_SHARDS", 2, raising=False)
    dst = tmp_path / "ds"
    (dst / "manifest.json").write_text(json.dumps(written))
    with pytest.raises(ManifestError, match="lists 3 shards, more than the 2"):
        load_manifest(dst)
