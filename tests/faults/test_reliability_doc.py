"""docs/reliability.md names, for each guarantee, the test that checks it: every test it names exists."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from .helpers import REPO


def test_every_test_named_in_the_reliability_page_exists() -> None:
    page = (REPO / "docs" / "reliability.md").read_text()
    named = re.findall(r"`(tests/faults/[\w/]+\.py)::(\w+)`", page)
    assert len(named) >= 30
    for file, function in named:
        path = REPO / file
        assert path.is_file(), file
        functions = {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}
        assert function in functions, f"{file}::{function} is named in docs/reliability.md but does not exist"


#: Tests of the test tools themselves (the corpus), not of a guarantee.
NOT_GUARANTEES = {"test_corpus_is_what_it_claims"}


def test_every_fault_test_is_named_in_the_reliability_page() -> None:
    page = (REPO / "docs" / "reliability.md").read_text()
    for path in sorted(Path(REPO / "tests" / "faults").glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        tests = [node.name for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
        missing = [name for name in tests if f"{path.name}::{name}" not in page and name not in NOT_GUARANTEES]
        assert not missing, f"{path.name}: {missing} not in docs/reliability.md"
