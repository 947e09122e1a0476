"""The python blocks of docs/quickstart.md run as written against a real dataset."""
from __future__ import annotations

from pathlib import Path

from ..formats.test_docs_contract import REPO, python_blocks


def test_quickstart_snippets_run(dataset_dir: Path) -> None:
    blocks = python_blocks(REPO / "docs" / "quickstart.md")
    assert blocks
    for block in blocks:
        exec(compile(block, "docs/quickstart.md", "exec"), {"DST": str(dataset_dir)})
