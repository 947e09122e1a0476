"""The package imports only downward: vocabulary -> manifest/integrity/codecs -> sources | formats
-> operations and read side -> cli. Sources and formats never import each other."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "shardkit"

LAYERS = {
    "errors": 0, "units": 0, "records": 0, "schema": 0, "order": 0, "format_registry": 0,
    "runtime": 0, "writing": 0, "read": 0, "ops": 0, "remote": 0,  # the groups' __init__ modules (docstrings only)
    "integrity": 1, "manifest": 1, "codecs": 1, "samples": 1, "shard_table": 1, "sample_table": 1,
    "options": 1, "option_types": 1,
    "writing.plan": 1, "writing.journal": 1, "writing.skip_log": 1, "read.indices": 1, "read.shared_buffers": 1,
    "read.budget": 1, "read.tagging": 1,
    "runtime.progress": 1, "runtime.interrupt": 1, "runtime.workers": 1, "runtime.isolation": 1, "runtime.forks": 1,
    "runtime.fault_points": 1,
    "remote.location": 1, "remote.retry": 1, "remote.transfer": 2, "remote.cache_folder": 2, "remote.cache": 3,
    "sources": 2, "formats": 2,
    "writing.sink": 3, "writing.commit": 3, "writing.conversion_plan": 3, "writing.session": 3, "writing.runner": 3,
    "writing.parallel": 3, "writing.ray_executor": 3, "writing.table_writer": 3, "writing.recorded_options": 2,
    "writing.repair_diagnosis": 3, "writing.append_inputs": 3, "writing.append": 4,
    "read.row_arena": 3, "read.watch": 3, "read.cache": 3,
    "ops.shard_checks": 3, "ops.key_table": 3,
    "writing.conversion": 4, "writing.repair": 4, "ops.verification": 4, "ops.info": 4, "ops.merging": 4,
    "ops.pull": 4, "ops.push": 5, "writing.repair_run": 5,
    "read.shards": 4, "read.dataset": 4, "read.batches": 4, "read.sampler": 4, "read.splits": 4,
    "read.epochs": 4, "read.mixing": 4, "read.stream_plan": 4, "read.remote_files": 4,
    "ops.bench": 5, "ops.bench_plot": 5, "ops.duplicates": 5, "ops.sample_digests": 5, "ops.demo": 5, "read.stream": 5,
    "cli": 6, "__init__": 7, "__main__": 7,
    # samples of named fields
    "field_files": 1, "writing.shuffle": 1, "field_views": 2, "writing.field_records": 3, "writing.field_shard": 3,
    "ops.field_checks": 3,
    "writing.writer_plan": 4, "writing.writer_finish": 4, "writing.writer": 4, "ops.field_merge": 4,
    "read.fields_dataset": 4, "read.field_collate": 4, "writing.field_convert": 4,
    "writing.stored_fields": 4, "writing.field_replay": 4, "writing.field_repair": 4, "writing.field_append": 4,
}


GROUPS = ("read", "writing", "ops", "runtime", "remote")


def _component(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in GROUPS:
        return f"{parts[1]}.{parts[2]}"
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
