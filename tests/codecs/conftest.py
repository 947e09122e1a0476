"""Fixtures of the image-mode tests."""
from __future__ import annotations

from pathlib import Path

import pytest
from .image_cases import odd_files


@pytest.fixture(scope="session")
def odd_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder tree (classes "bad" and "ok") of every odd input in odd_files()."""
    root = tmp_path_factory.mktemp("odd") / "images"
    for rel, data in odd_files().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root
