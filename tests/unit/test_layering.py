"""The package imports only downward: vocabulary -> manifest/integrity/codecs -> sources | formats
-> operations and read side -> cli. Sources and formats never import each other."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "shardkit"

LAYERS = {
    "errors": 0, "units": 0, "records": 0, "schema": 0, "order": 0,
    "integrity": 1, "manifest": 1, "codecs": 1, "plan": 1, "progress": 1, "journal": 1, "samples": 1, "interrupt": 1,
    "workers": 1, "shard_table": 1, "options": 1, "openfiles": 1, "isolation": 1,
    "sources": 2, "formats": 2,
    "sink": 3, "commit": 3, "handles": 3, "parallel": 3, "ray_executor": 3,
    "conversion": 4, "verification": 4, "info": 4, "dataset": 4, "batches": 4, "sampler": 4, "splits": 4, "merging": 4,
    "bench": 5, "bench_plot": 5, "stream": 5,
    "demo": 5, "cli": 6, "__init__": 7, "__main__": 7,
}


def _component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list:
    module = "shardkit." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(target)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [(module, target) for target in found if target.startswith("shardkit")]


def test_imports_point_downward() -> None:
    bad = []
    for path in PACKAGE.rglob("*.py"):
        for module, target in _imports(path):
            src, dst = _component(module), _component(target)
            if src == dst or target == "shardkit":
                continue
            assert src in LAYERS and dst in LAYERS, f"unknown module {src} or {dst}: add it to LAYERS"
            if LAYERS[dst] > LAYERS[src]:
                bad.append(f"{module} imports {target}")
    assert not bad, "\n".join(bad)


def test_sources_and_formats_do_not_import_each_other() -> None:
    for path in (PACKAGE / "formats").rglob("*.py"):
        assert not [t for _, t in _imports(path) if t.startswith("shardkit.sources")], path
    for path in (PACKAGE / "sources").rglob("*.py"):
        # the shard-dataset source may use the registry, never a format module directly
        assert not [t for _, t in _imports(path) if t.startswith("shardkit.formats.")], path


def test_import_shardkit_is_light() -> None:
    code = "import sys, shardkit; print(sorted(m for m in ('torch', 'h5py', 'lmdb', 'PIL') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
