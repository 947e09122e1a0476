"""The on-disk contract pages are true: their code blocks run against real datasets, and every
manifest shardkit writes validates against formats/manifest.schema.json."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def python_blocks(page: Path) -> list:
    """The ```python fenced blocks of a markdown page."""
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_manifest_validates_against_schema(dataset_dir: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "formats" / "manifest.schema.json").read_text())
    jsonschema.validate(json.loads((dataset_dir / "manifest.json").read_text()), schema)


def test_manifest_page_snippets_run(dataset_dir: Path) -> None:
    for block in python_blocks(REPO / "formats" / "manifest.md"):
        exec(compile(block, "formats/manifest.md", "exec"), {"DST": str(dataset_dir)})


def test_format_page_reads_every_sample_with_the_raw_library(dataset_dir: Path, fmt: str) -> None:
    """formats/<fmt>.md's snippet, run as written, reads exactly what shardkit reads."""
    import shardkit
    blocks = python_blocks(REPO / "formats" / f"{fmt}.md")
    assert blocks, f"formats/{fmt}.md has no python example"
    scope = {"DST": str(dataset_dir)}
    exec(compile(blocks[0], f"formats/{fmt}.md", "exec"), scope)
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    assert len(scope["samples"]) == len(ds)
    assert scope["keys"] == [ds.key(index) for index in range(len(ds))]
    assert scope["keys"][0] and all("/" in key for key in scope["keys"])    # image paths relative to SRC
    for index, (payload, class_name) in enumerate(scope["samples"]):
        stored, label = ds[index]
        assert bytes(payload) == bytes(memoryview(stored))
        assert class_name == ds.classes[label]


def test_keys_page_snippets_run() -> None:
    for block in python_blocks(REPO / "formats" / "keys.md"):
        exec(compile(block, "formats/keys.md", "exec"), {})
