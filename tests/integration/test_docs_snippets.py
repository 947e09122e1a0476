"""The python blocks of the user docs run as written against real datasets."""
from __future__ import annotations

from pathlib import Path

import pytest

from ..formats.test_docs_contract import REPO, python_blocks


@pytest.mark.parametrize("page", ["quickstart.md", "api.md", "training.md"])
def test_docs_snippets_run(page: str, dataset_dir: Path, image_tree: Path, tmp_path: Path) -> None:
    blocks = python_blocks(REPO / "docs" / page)
    assert blocks
    scope = {"DST": str(dataset_dir)}
    if page == "api.md":
        scope = {"SRC": str(image_tree), "DST": str(tmp_path / "api")}
    for block in blocks:
        exec(compile(block, f"docs/{page}", "exec"), scope)
