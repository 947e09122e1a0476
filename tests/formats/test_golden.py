"""Every committed golden dataset (one per format version) still reads, verifies and matches."""
from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

import shardkit
from shardkit.formats import format_names, get_format

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
ALL_GOLDEN = sorted(path for path in GOLDEN.iterdir() if (path / "manifest.json").is_file())
#: Datasets of one payload per sample, and of named fields (manifest version 2).
GOLDEN_DIRS = [path for path in ALL_GOLDEN if not path.name.endswith("-fields")]
FIELD_GOLDENS = [path for path in ALL_GOLDEN if path.name.endswith("-fields")]


@pytest.mark.parametrize("golden", GOLDEN_DIRS, ids=[path.name for path in GOLDEN_DIRS])
def test_golden_dataset_reads(golden: Path) -> None:
    expected = json.loads((golden / "expected.json").read_text())
    assert shardkit.verify(str(golden), mode="deep").ok
    ds = shardkit.open_dataset(golden, decode=None)
    assert len(ds) == len(expected)
    for index, item in enumerate(expected):
        payload, label = ds[index]
        if "sha256" in item:
            assert hashlib.sha256(bytes(memoryview(payload))).hexdigest() == item["sha256"]
        else:
            assert payload.tolist() == item["values"]
        assert ds.classes[label] == item["class"]
        if "-v1" in golden.name:
            assert ds.key(index) is None              # datasets written before keys have none
        elif "key" in item:
            assert ds.key(index) == item["key"]


def test_version_1_goldens_have_no_keys_and_refuse_return_key() -> None:
    old = [path for path in GOLDEN_DIRS if "-v1" in path.name]
    assert old
    for golden in old:
        assert shardkit.open_dataset(golden).key(0) is None
        with pytest.raises(shardkit.UsageError, match="before samples stored their keys"):
            shardkit.open_dataset(golden, return_key=True)


KEYED = [path for path in GOLDEN_DIRS
         if "-v1" not in path.name and (path.name.count("-") == 1 or path.name.endswith("-rows"))]


@pytest.mark.parametrize("golden", KEYED, ids=lambda path: path.name)
def test_return_key_gives_sample_label_and_key(golden: Path) -> None:
    expected = json.loads((golden / "expected.json").read_text())
    ds = shardkit.open_dataset(golden, decode=None, return_key=True)
    sample, label, key = ds[len(ds) - 1]
    assert (ds.classes[label], key) == (expected[-1]["class"], expected[-1]["key"])


def _make_golden():
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_stored_layout_has_a_golden_dataset() -> None:
    missing = [path.name for path in _make_golden().expected_dirs() if not (path / "manifest.json").is_file()]
    assert not missing, f"run python tests/golden/make_golden.py to add {missing}"


@pytest.mark.parametrize("golden", GOLDEN_DIRS, ids=[path.name for path in GOLDEN_DIRS])
def test_golden_layout_is_what_its_name_says(golden: Path) -> None:
    schema = json.loads((golden / "manifest.json").read_text())["schema"]
    layout = golden.name.split("-", 2)[2] if golden.name.count("-") >= 2 else ""
    if layout.startswith("raw-"):
        assert (schema["layout"], schema["compression"]) == ("array", layout[4:])
    elif layout in ("tabular", "rows"):
        assert (schema["kind"], schema["layout"]) == ("tabular", "array")
    else:
        assert (schema["layout"], schema["compression"]) == ("bytes", "none")


@pytest.mark.parametrize("golden", FIELD_GOLDENS, ids=[path.name for path in FIELD_GOLDENS])
def test_golden_dataset_of_fields_reads(golden: Path) -> None:
    expected = json.loads((golden / "expected.json").read_text())
    assert json.loads((golden / "manifest.json").read_text())["manifest_version"] == 2
    assert shardkit.verify(str(golden), mode="deep").ok
    ds = shardkit.open_dataset(golden, decode={"image": None, "blob": None})
    assert len(ds) == len(expected) and ds.classes == ["cat", "dog"]
    for index, item in enumerate(expected):
        sample = ds[index]
        assert hashlib.sha256(sample["image"]).hexdigest() == item["image_sha256"]
        assert (sample["blob"].hex() if sample["blob"] is not None else None) == item["blob"]
        assert sample["vec"].tolist() == item["vec"]
        assert (sample["boxes"].tolist() if sample["boxes"] is not None else None) == item["boxes"]
        for name in ("caption", "label", "count", "score", "meta"):
            assert sample[name] == item[name], name
        assert ds.key(index) == item["key"]


def test_every_format_version_has_a_golden_dataset() -> None:
    names = {path.name for path in GOLDEN_DIRS}
    missing = [f"{name}-v{get_format(name).version}" for name in format_names()
               if f"{name}-v{get_format(name).version}" not in names]
    assert not missing, f"run python tests/golden/make_golden.py to add {missing}"
