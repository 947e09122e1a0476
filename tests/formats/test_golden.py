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
GOLDEN_DIRS = sorted(path for path in GOLDEN.iterdir() if (path / "manifest.json").is_file())


@pytest.mark.parametrize("golden", GOLDEN_DIRS, ids=[path.name for path in GOLDEN_DIRS])
def test_golden_dataset_reads(golden: Path) -> None:
    expected = json.loads((golden / "expected.json").read_text())
    assert shardkit.verify(str(golden), mode="deep").ok
    ds = shardkit.open_dataset(golden, decode=None)
    assert len(ds) == len(expected)
    for index, item in enumerate(expected):
        payload, label = ds[index]
        assert hashlib.sha256(bytes(memoryview(payload))).hexdigest() == item["sha256"]
        assert ds.classes[label] == item["class"]


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
    elif layout == "tabular":
        assert (schema["kind"], schema["layout"]) == ("tabular", "array")
    else:
        assert (schema["layout"], schema["compression"]) == ("bytes", "none")


def test_every_format_version_has_a_golden_dataset() -> None:
    names = {path.name for path in GOLDEN_DIRS}
    missing = [f"{name}-v{get_format(name).version}" for name in format_names()
               if f"{name}-v{get_format(name).version}" not in names]
    assert not missing, f"run python tests/golden/make_golden.py to add {missing}"
