"""--resume on a finished dataset: nothing is reused unchecked. Every shard and the sample table
are compared with the manifest's record (size and sha256, read through a descriptor that is a
regular file inside DST), and what is missing or damaged is written again from SRC through the
same plan and sink, so the dataset ends as `shardkit verify` expects it, byte for byte."""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Tuple

from ..errors import ConversionError, ManifestError, UsageError
from ..integrity import hash_shard_file
from ..manifest import MANIFEST_NAME, Manifest, load_manifest
from ..options import RunOptions
from ..sources import Source
from .conversion_plan import ConversionPlan
from .journal import Journal, refuse_links
from .runner import write_shards
from .session import ConversionSession
from .table_writer import write_sample_table


def finished_dataset(dst: str, fingerprint: str, run: RunOptions) -> Optional[Manifest]:
    """With --resume, the manifest of a DST finished from the same plan; None when there is no
    finished dataset to resume (no manifest, or an interrupted run's journal)."""
    if not run.resume or not (Path(dst) / MANIFEST_NAME).is_file() or Journal(dst).exists():
        return None
    refuse_links(dst)           # shards/ (or the manifest) a link out of DST: nothing is read through it
    manifest = load_manifest(dst)
    if manifest.source.get("fingerprint") != fingerprint:
        raise UsageError("already holds a complete dataset made from other input or options; "
                         "use --overwrite to replace it", path=dst)
    return manifest


def repair(manifest: Manifest, dst: str, plan: ConversionPlan, source: Source,
           run: RunOptions) -> Tuple[int, List[str]]:
    """Write again each shard of manifest whose file is missing or differs from its record, and
    the sample table if it does or a shard was written: (shards written, one line per file written
    again). The
    lock is held throughout; a file written again that still differs (SRC changed in place since
    the conversion) is a ConversionError naming it."""
    with ConversionSession(dst, run, complete=True) as session:
        notes: List[str] = []
        tasks = []
        for number, entry in enumerate(manifest.shards):
            problem = _problem(dst, entry.path, entry.size, entry.sha256)
            if problem:
                task = plan.task_of(entry.path)
                if task is None or task.shard != number:
                    raise ManifestError(f"shard {number} ({entry.path}) is not one the plan writes", path=dst)
                tasks.append(task)
                notes.append(f"{entry.path} {problem}; written again")
        if tasks:
            ctx = plan.sink_context(dst, source, run)
            for result in write_shards(ctx, tasks, run, already_skipped=0, latch=session.latch):
                entry = manifest.shards[result.shard]
                if (result.path, result.size, result.sha256) != (entry.path, entry.size, entry.sha256):
                    raise ConversionError("written again from SRC, it differs from the manifest's record "
                                          "(SRC changed since it was converted); convert again with --overwrite",
                                          path=str(Path(dst) / entry.path))
        table = manifest.sample_table
        problem = _problem(dst, table["path"], table["size"], table["sha256"]) if table is not None else ""
        if tasks or problem:
            if write_sample_table(dst, manifest) != table:
                raise ConversionError("written again from the shards, the sample table differs from the "
                                      "manifest's record; convert again with --overwrite", path=dst)
            if table is not None and problem:
                notes.append(f"{table['path']} {problem}; written again")
        session.latch.check()
        session.journal.remove()
    return len(tasks), notes


def _problem(dst: str, path: str, size: int, sha256: Any) -> str:
    """What is wrong with the file at DST/path against its record ("" if nothing)."""
    if not (Path(dst) / path).exists():
        return "was missing"
    try:
        digest = hash_shard_file(Path(dst) / path, dst, size)
    except (OSError, ValueError):
        return "did not have its recorded size (or is not a regular file inside DST)"
    return "" if digest == sha256 else "did not match its recorded sha256"


__all__ = ["finished_dataset", "repair"]
