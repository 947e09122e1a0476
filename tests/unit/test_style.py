"""flake8 passes on the package, tests and benchmarks (configuration in setup.cfg); the package's
modules and functions stay small."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_flake8_clean() -> None:
    pytest.importorskip("flake8")
    targets = [name for name in ("shardkit", "tests", "benchmarks") if (REPO / name).exists()]
    done = subprocess.run([sys.executable, "-m", "flake8", *targets], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


#: The most lines a module, and a function, of the package may hold.
MODULE_LINES, FUNCTION_LINES = 400, 60


def test_no_module_or_function_of_the_package_is_long() -> None:
    too_long = []
    for path in sorted((REPO / "shardkit").rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(REPO).as_posix()
        if len(source.splitlines()) > MODULE_LINES:
            too_long.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, too_long


def test_each_name_a_package_exports_is_defined_once() -> None:
    """A function or class a package's __init__ exports (its __all__) is defined in one module of
    shardkit only: two unrelated functions of one name (one opening a shard, one decoding an image)
    send a reader to the wrong one."""
    import ast
    defined: dict = {}
    exported: dict = {}
    for path in sorted((REPO / "shardkit").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                defined.setdefault(node.name, []).append(str(path.relative_to(REPO)))
            if path.name == "__init__.py" and isinstance(node, ast.Assign) \
                    and any(getattr(target, "id", None) == "__all__" for target in node.targets):
                try:
                    exported[str(path.relative_to(REPO))] = ast.literal_eval(node.value)
                except ValueError:          # shardkit/__init__.py builds its list: its names are re-exports
                    continue
    assert exported, "no package __all__ was read"
    twice = {name: defined[name] for names in exported.values() for name in names if len(defined.get(name, [])) > 1}
    assert not twice, twice


def test_each_declared_marker_marks_tests_and_the_readme_runs_them_all() -> None:
    """setup.cfg's markers are used (a declared `slow` that marks nothing lets slow tests hide in
    the quick run), and the README's test command deselects none of them."""
    import configparser
    import re
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    declared = [line.split(":")[0].strip() for line in config["tool:pytest"]["markers"].strip().splitlines()]
    assert "slow" in declared
    sources = "\n".join(path.read_text() for path in (REPO / "tests").rglob("test_*.py"))
    for marker in declared:
        uses = len(re.findall(rf"\bpytest\.mark\.{marker}\b", sources))
        assert uses >= (5 if marker == "slow" else 1), f"marker {marker!r} marks {uses} tests"
    command = next(line for line in (REPO / "README.md").read_text().splitlines() if "-m pytest" in line)
    assert " -m \"not" not in command and " -m 'not" not in command, command
