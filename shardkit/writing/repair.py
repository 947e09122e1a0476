"""Repairing a finished dataset (`shardkit repair DST --from SRC`, and --resume of a finished DST):
nothing is reused unchecked. Every shard and the sample table are compared with the manifest's
record (size and sha256, read through a descriptor that is a regular file inside DST), and what is
missing or damaged is written again from SRC through the same plan and sink, checked against the
record before it replaces anything, so the dataset ends as `shardkit verify` expects it, byte for byte."""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from ..errors import ConversionError, UsageError
from ..integrity import durable_replace, fsync_path, hash_file, hash_shard_file
from ..manifest import MANIFEST_NAME, Manifest, load_manifest
from ..options import RunOptions
from ..runtime.fault_points import kill_point
from ..runtime.interrupt import SigintLatch
from ..runtime.progress import Progress
from ..sources import Source
from .conversion_plan import ConversionPlan
from .journal import Journal, refuse_links, remove_stale_temps
from .plan import ShardTask
from .repair_diagnosis import describe_difference
from .session import ConversionSession
from .sink import SinkContext, WrittenShard, write_shard_file
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


def finished_for(dst: str, action: str) -> Manifest:
    """DST's manifest, when DST holds a finished dataset that no conversion is writing or left
    unfinished (UsageError naming the action otherwise)."""
    journal = Journal(dst)
    journal.check_unlocked()
    refuse_links(dst)
    manifest = load_manifest(dst)
    if journal.exists():
        raise UsageError(f"holds an unfinished conversion; finish it with `shardkit convert ... --resume` "
                         f"before {action}", path=dst)
    return manifest


def repair_shards(manifest: Manifest, dst: str, plan: Optional[ConversionPlan], source: Optional[Source],
                  run: RunOptions, shards: Optional[Sequence[int]] = None, table: bool = True,
                  written_before: bool = False) -> Tuple[int, List[str]]:
    """Write again each shard of manifest (of `shards`, default all) whose file is missing or differs
    from its record, and (with `table`) the sample table if it does or a shard was written (here, or
    before: written_before): (shards written, one line per file written again). The lock is held
    throughout. Every shard is first
    written to a temporary name and its sha256 compared with the manifest's; only when all match
    are they renamed into place, so a SRC that no longer holds the same inputs is refused
    (ConversionError naming what differs) with DST untouched, and a killed repair leaves each shard
    as it was or repaired. Without a plan (no SRC given for these shards) a damaged one is refused."""
    with ConversionSession(dst, run, complete=True) as session:
        remove_stale_temps(dst)                 # what a killed repair staged
        notes: List[str] = []
        tasks = []
        for number in shards if shards is not None else range(len(manifest.shards)):
            entry = manifest.shards[number]
            problem = file_problem(dst, entry.path, entry.size, entry.sha256)
            if problem:
                tasks.append(_planned_task(plan, manifest, number, entry.path, dst))
                notes.append(f"{entry.path} {problem}; written again")
        staged = _staged_checked(manifest, dst, plan, source, run, tasks, session.latch) if tasks else []
        for written in staged:
            kill_point("repair-replace", written.result.path)     # tests only: killed between two renames
            durable_replace(written.tmp, written.final)
        if table:
            notes += _repair_table(manifest, dst, rewrite=bool(tasks) or written_before)
        session.latch.check()
        session.journal.remove()
    return len(tasks), notes


def _staged_checked(manifest: Manifest, dst: str, plan: Optional[ConversionPlan], source: Optional[Source],
                    run: RunOptions, tasks: List[ShardTask], latch: SigintLatch) -> List[WrittenShard]:
    """The tasks' shards written to temporary names, each checked against the manifest's record
    (removed again, and ConversionError, when one is not the manifest's)."""
    assert plan is not None and source is not None      # _planned_task refused every task without one
    staged = _stage(plan.sink_context(dst, source, run), tasks, run, latch)
    try:
        _check_staged(manifest, dst, plan, staged)
    except BaseException:
        for written in staged:
            written.tmp.unlink(missing_ok=True)
        raise
    return staged


def damaged_shards(manifest: Manifest, dst: str) -> List[int]:
    """The numbers of the shards whose file is missing or differs from its record."""
    return [number for number, entry in enumerate(manifest.shards)
            if file_problem(dst, entry.path, entry.size, entry.sha256)]


def _repair_table(manifest: Manifest, dst: str, rewrite: bool) -> List[str]:
    """The sample table written again from the shards when a shard was (rewrite) or it is damaged,
    and checked against the manifest's record: the note saying so, if it was damaged."""
    table = manifest.sample_table
    problem = file_problem(dst, table["path"], table["size"], table["sha256"]) if table is not None else ""
    if not (rewrite or problem):
        return []
    if write_sample_table(dst, manifest) != table:
        raise ConversionError("written again from the shards, the sample table differs from the "
                              "manifest's record; convert again with --overwrite", path=dst)
    return [f"{table['path']} {problem}; written again"] if table is not None and problem else []


def _planned_task(plan: Optional[ConversionPlan], manifest: Manifest, number: int, path: str,
                  dst: str) -> ShardTask:
    if plan is None:
        raise missing_source(manifest, number, path, dst)
    task = plan.task_of(path)
    if task is None or task.shard != number:
        raise ConversionError(f"SRC plans {len(plan.ranges)} shards, not shard {number} ({path}) as the dataset "
                              "was converted: SRC no longer holds the same inputs; nothing was changed", path=dst)
    return task


def missing_source(manifest: Manifest, number: int, path: str, dst: str) -> UsageError:
    """The error for a damaged shard whose append's SRC was not given."""
    appended = [append for append in manifest.source.get("appended", [])
                if append["first_shard"] <= number < append["first_shard"] + append["shards"]]
    origin = appended[0]["path"] if appended else manifest.source.get("path")
    return UsageError(f"shard {number} ({path}) was appended from {origin}; give that SRC too: "
                      "`shardkit repair DST --from SRC --from APPENDED_SRC ...`, the conversion's SRC "
                      "first, then each append's in order", path=dst)


def _stage(ctx: SinkContext, tasks: List[ShardTask], run: RunOptions, latch: SigintLatch) -> List[WrittenShard]:
    """Each task's shard written to its temporary name, fsynced, with its size and sha256."""
    staged: List[WrittenShard] = []
    total = sum(task.stop - task.start for task in tasks)
    try:
        with Progress(total, "repair", quiet=run.quiet) as bar, latch.deferred():
            def advance(items: int, nbytes: int) -> None:
                latch.check()
                bar.advance(items, nbytes)

            for task in tasks:
                written = write_shard_file(ctx, task, progress=advance)
                staged.append(written)
                fsync_path(written.tmp)
                written.result.sha256 = hash_file(written.tmp)
                latch.check()
    except BaseException:
        for written in staged:
            written.tmp.unlink(missing_ok=True)
        raise
    return staged


def _check_staged(manifest: Manifest, dst: str, plan: ConversionPlan, staged: List[WrittenShard]) -> None:
    """ConversionError naming the first staged shard that is not the manifest's, and why."""
    for written in staged:
        result = written.result
        entry = manifest.shards[result.shard]
        if (result.path, result.size, result.sha256) != (entry.path, entry.size, entry.sha256):
            why = describe_difference(plan.fmt, manifest, dst, result.shard, written.tmp)
            raise ConversionError(f"shard {result.shard} ({entry.path}) cannot be rebuilt from SRC as converted: "
                                  f"{why}; nothing was changed", path=dst)


def file_problem(dst: str, path: str, size: int, sha256: Any) -> str:
    """What is wrong with the file at DST/path against its record ("" if nothing)."""
    if not (Path(dst) / path).exists():
        return "was missing"
    try:
        digest = hash_shard_file(Path(dst) / path, dst, size)
    except (OSError, ValueError):
        return "did not have its recorded size (or is not a regular file inside DST)"
    return "" if digest == sha256 else "did not match its recorded sha256"


__all__ = ["damaged_shards", "file_problem", "finished_dataset", "finished_for", "missing_source", "repair_shards"]
