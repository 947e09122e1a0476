"""flake8 passes on the package, tests and benchmarks (configuration in setup.cfg)."""
from __future__ import annotations

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
