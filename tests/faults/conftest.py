"""Fixtures of the fault-injection suite: one small tree for the process tests, and per format
the files of its uninterrupted conversion (with a fixed SOURCE_DATE_EPOCH, so every run of the
same plan is byte-identical, manifest included)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Tuple

import pytest

from .helpers import convert_args, make_tiny_tree, timed_run, tree_bytes


@pytest.fixture(scope="session")
def process_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("process") / "src"
    make_tiny_tree(root, 120, seed=3)
    return root


@pytest.fixture(scope="session")
def _references(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {"root": tmp_path_factory.mktemp("references")}


@pytest.fixture
def reference(_references: dict, process_tree: Path, fmt: str) -> Tuple[Dict[str, bytes], Tuple[float, float]]:
    """(every file of an uninterrupted conversion of process_tree, its timeline: seconds until
    the plan was recorded and until the command ended)."""
    if fmt not in _references:
        dst = _references["root"] / fmt
        timeline = timed_run(convert_args(process_tree, dst, fmt), dst)
        _references[fmt] = (tree_bytes(dst), timeline)
    return _references[fmt]
