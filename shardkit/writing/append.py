"""convert NEW_SRC DST --append: NEW_SRC's new inputs become new shards of the dataset in DST.

The new shards are converted into a staging dataset inside DST's journal folder (DST/.shardkit/
append), with the dataset's options, identity, seed and the next shard numbers, while DST's lock
is held; an interrupted append resumes there. Publishing renames them into shards/, writes a
sample table under a new name (a reader of the old manifest keeps the old table) and, last, the
new manifest. Old shards, the old manifest and the old table are never written, so until the
manifest is replaced every reader sees the old dataset, and afterwards the whole one. Tables of
earlier appends (named by neither manifest) are then removed."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Set, Tuple

from ..errors import ConversionError, UsageError
from ..field_files import is_table_name
from ..integrity import atomic_write_bytes, fsync_path, hash_shard_file
from ..manifest import MANIFEST_NAME, SKIPPED_NAME, Manifest, ShardEntry, ShardTable, load_manifest
from ..options import PlanOptions, RunOptions, split_convert_options
from ..runtime.fault_points import kill_point
from ..sample_table import TABLE_NAMES, table_name
from ..sources import open_source
from .append_inputs import check_options, new_items
from .conversion_plan import ConversionPlan, plan_conversion
from .journal import APPEND_DIR, JOURNAL_DIR, Journal
from .plan import ShardTask
from .recorded_options import replay_options
from .repair import finished_for
from .session import creation_time
from .table_writer import joined_sample_table, write_sample_table


def append_inputs(src: str, dst: str, given: Dict[str, Any], run: RunOptions, started: float) -> Any:
    """Append SRC's new inputs to the dataset in DST; its ConvertReport (conversion.py's)."""
    from .conversion import _convert_source
    manifest = finished_for(dst, "appending")
    if manifest.part is not None:
        raise UsageError("is one part of a --part conversion; merge the parts before appending", path=dst)
    keywords = replay_options(manifest, dst)
    check_options(given, keywords, dst)
    if manifest.fields is not None:             # a dataset of named fields converted from files
        from .field_append import append_fields
        reach = {name: given[name] for name in ("storage_options", "in_flight") if given.get(name) is not None}
        return append_fields(src, dst, manifest, {**keywords, **reach}, run, started)
    options, _, source_options = split_convert_options(keywords)
    source = open_source(src, source_options, run, onto=manifest)
    try:
        if source.kind != manifest.source.get("kind"):
            raise UsageError(f"is a {source.kind} source; the dataset was converted from a "
                             f"{manifest.source.get('kind')}", path=src)
        source.choose(options)
        keep, already = new_items(source, manifest, dst, src)
        notes = [f"{len(already)} inputs already in DST (same key and content) were skipped"] if already else []
        notes += source.summary().get("warnings", [])
        if not len(keep):
            return append_report(manifest, dst, started, len(manifest.shards), notes + ["nothing new to append"])
        source.restrict(keep, manifest.classes + sorted(set(source.classes) - set(manifest.classes)))
        plan = append_plan(source, options, src, manifest)
        stage = os.path.join(dst, JOURNAL_DIR, APPEND_DIR)

        def stage_and_publish() -> Manifest:
            staged = _staged(stage, plan.fingerprint)
            if staged is None:
                stage_run = dataclasses.replace(run, append=False, resume=os.path.isdir(stage))
                _convert_source(source, src, stage, plan, stage_run, started, keywords)
                staged = load_manifest(stage)
            return _publish(dst, stage, manifest, staged, src, len(already))
        combined = under_lock(dst, stage_and_publish)
    finally:
        source.close()
    return append_report(combined, dst, started, len(manifest.shards), notes)


def append_report(manifest: Manifest, dst: str, started: float, reused: int, warnings: List[str]) -> Any:
    """The ConvertReport of an append (conversion.py's), with its warnings."""
    from .conversion import report_for
    report = report_for(manifest, dst, started, reused=reused)
    report.warnings = warnings
    return report


def under_lock(dst: str, stage_and_publish: Callable[[], Manifest]) -> Manifest:
    """Stage and publish an append while DST's lock is held; the journal (and stage) removed once published."""
    journal = Journal(dst)
    journal.lock()
    try:
        combined = stage_and_publish()
        journal.remove()
    finally:
        journal.unlock()
    return combined


def append_plan(source: Any, options: PlanOptions, src: str, manifest: Manifest) -> ConversionPlan:
    """The plan of the new inputs, numbered after the dataset's shards, with its identity."""
    plan = plan_conversion(source, options, src)
    base = len(manifest.shards)
    tasks = [ShardTask(base + task.shard, task.start, task.stop) for task in plan.tasks]
    onto = manifest.to_dict()["manifest_sha256"]
    fingerprint = hashlib.sha256(f"append {plan.fingerprint} onto {onto}".encode()).hexdigest()
    return dataclasses.replace(plan, tasks=tasks, fingerprint=fingerprint,
                               dataset_id=manifest.dataset_id or plan.dataset_id)


def _staged(stage: str, fingerprint: str) -> "Manifest | None":
    """The finished staging dataset of this very append (killed while publishing), or None after
    removing what another, unpublished append left there (nothing of it is in the dataset)."""
    journal = Journal(stage)
    if (Path(stage) / MANIFEST_NAME).is_file() and not journal.exists():
        staged = load_manifest(stage)
        if staged.source.get("fingerprint") == fingerprint:
            return staged
    plan = journal.read_plan()
    if os.path.lexists(stage) and (plan is None or plan.get("fingerprint") != fingerprint):
        shutil.rmtree(stage)
    return None


def _publish(dst: str, stage: str, old: Manifest, staged: Manifest, src: str, already: int) -> Manifest:
    """Move the staged shards into shards/ and write the dataset's new sample table, skipped list and,
    last, manifest."""
    move_staged(dst, stage, ((entry.path, entry.size, entry.sha256) for entry in staged.shards))
    combined = _combined(old, staged, src, already)
    kill_point("append-publish", dst)           # tests only: killed with the shards moved, no manifest yet
    if old.sample_table is not None or staged.sample_table is not None:
        name = table_name(combined.num_samples)
        parts = [(dst, old.sample_table), (stage, staged.sample_table)]
        combined.sample_table = joined_sample_table(dst, name, parts) or write_sample_table(dst, combined, name)
    join_skipped(dst, stage)
    combined.save(dst)
    drop_older_tables(dst, old, combined)
    return combined


def move_staged(dst: str, stage: str, files: Iterable[Tuple[str, int, str]]) -> None:
    """Rename the staged files (path, size, sha256) into DST's shards/ and fsync the folder; a file
    moved already (an append killed while publishing) must still hash to its record."""
    for path, size, sha256 in files:
        final, moved = Path(dst) / path, Path(stage) / path
        if moved.exists():
            os.replace(moved, final)
        elif hash_shard_file(final, dst, size) != sha256:
            raise ConversionError("a staged file of the append is gone; run the append again", path=str(final))
    fsync_path(Path(dst) / "shards")


def join_skipped(dst: str, stage: str) -> None:
    """DST's skipped.jsonl followed by the staged append's, written atomically."""
    atomic_write_bytes(Path(dst) / SKIPPED_NAME, _read(Path(dst) / SKIPPED_NAME) + _read(Path(stage) / SKIPPED_NAME))


def drop_older_tables(dst: str, old: Manifest, new: Manifest) -> None:
    """Remove the sample tables of DST that neither the new manifest nor the one before it names:
    those of earlier appends, which would otherwise pile up (12 bytes a sample each). A reader maps
    its table as it opens the dataset (the map outlives the file), so a reader of an older manifest
    keeps reading its samples; only its targets(), which reads the file again, would find it gone."""
    kept = table_paths(old) | table_paths(new)
    for name in os.listdir(dst):
        if name not in kept and (TABLE_NAMES.match(name) or is_table_name(name)):
            os.unlink(os.path.join(dst, name))


def table_paths(manifest: Manifest) -> Set[str]:
    """The file names of the sample tables a manifest names (its own, or its columns')."""
    entries = [manifest.sample_table] if manifest.fields is None else list(manifest.fields.sample_tables.values())
    return {entry["path"] for entry in entries if entry is not None}


def _combined(old: Manifest, staged: Manifest, src: str, already: int) -> Manifest:
    """The manifest of the old shards followed by the staged ones, its summary and history."""
    offset = old.num_samples
    entries = list(old.shards) + [ShardEntry(entry.path, entry.num_samples, offset + entry.first_index, entry.size,
                                             entry.sha256) for entry in staged.shards]
    summary = dict(old.source.get("summary", {}))
    added = staged.source.get("summary", {})
    for name in ("converted", "skipped", "bytes"):
        summary[name] = int(summary.get(name, 0)) + int(added.get(name, 0))
    if "samples_per_class" in summary or "samples_per_class" in added:
        counts = {name: int(summary.get("samples_per_class", {}).get(name, 0))
                  + int(added.get("samples_per_class", {}).get(name, 0)) for name in staged.classes}
        summary["samples_per_class"] = counts
    history: List[Dict[str, Any]] = list(old.source.get("appended", []))
    history.append({"path": os.path.abspath(src), "fingerprint": staged.source.get("fingerprint"),
                    "first_shard": len(old.shards), "shards": len(staged.shards), "samples": staged.num_samples,
                    "already_in_dst": already, "skipped": int(added.get("skipped", 0)), "appended": creation_time()})
    if "table_files" in added:              # the names a table row's key starts with (held_items)
        history[-1]["table_files"] = added["table_files"]
    source = {**old.source, "summary": summary, "appended": history}
    return dataclasses.replace(old, shards=ShardTable.from_entries(entries), classes=list(staged.classes),
                               schema=staged.schema, source=source, sample_table=None)


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.is_file() else b""


__all__ = ["append_inputs", "append_plan", "append_report", "drop_older_tables", "join_skipped", "move_staged",
           "under_lock"]
