"""`shardkit repair DST --from SRC` of a dataset of named fields converted from files: every file of
every shard is compared with the manifest's record, and for the shards with a missing or damaged
file the conversion (or the append) that wrote them is run again from its SRC into DST/.shardkit/
repair (field_replay.py), stopped once the last of them is sealed. Every rebuilt file of those
shards must have the manifest's size and sha256 before any is renamed over a damaged one; otherwise
the repair is refused naming the shard, with those shards as they were. The conversion's shards are
repaired first (a merged dataset of parts: each part's), then each append's (whose new items are
those the shards before it do not hold)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import ConversionError
from ..field_views import column_views
from ..formats import get_format
from ..integrity import durable_replace, hash_file
from ..manifest import Manifest, ShardTable
from ..options import RunOptions
from ..runtime.fault_points import kill_point
from .field_replay import converted_positions, item_keys, keys_of, new_positions, open_replayed, write_replay
from .journal import JOURNAL_DIR, remove_stale_temps
from .repair import file_problem, missing_source
from .repair_diagnosis import describe_difference
from .session import ConversionSession
from .table_writer import write_sample_table

REPAIR_DIR = "repair"
#: The name of a shard's files written as a part: its part's number is group 1.
_PART_STEM = re.compile(r"shards/part-(\d+)-shard-\d+\.")
#: shard -> column -> what is wrong with its file
Damage = Dict[int, Dict[str, str]]


def repair_fields(manifest: Manifest, dst: str, sources: Sequence[str], keywords: Dict[str, Any],
                  run: RunOptions) -> Tuple[int, List[str]]:
    """(shards written again, one line per file written again) of a dataset of fields; the lock is
    held throughout, and the session removes the journal folder (the staging folder in it) at the end,
    whatever happens."""
    assert manifest.fields is not None
    with ConversionSession(dst, run, complete=True) as session:
        remove_stale_temps(dst)
        damage = _damage(manifest, dst)
        stage = Path(dst) / JOURNAL_DIR / REPAIR_DIR      # removed with the journal when the session ends
        for replay in _replays(manifest, keywords):     # in order: an append's new items are read off the shards before
            shards = [number for number in sorted(damage) if replay.first <= number < replay.stop]
            if not shards:
                continue
            for tmp, final in _rebuilt(manifest, dst, sources, replay, shards, damage, keywords, stage, run):
                kill_point("repair-replace", final.name)     # tests only: killed between two renames
                durable_replace(tmp, final)
        notes = [f"{manifest.fields.columns[column][number].path} {problem}; written again"
                 for number in sorted(damage) for column, problem in damage[number].items()]
        notes += _repair_tables(manifest, dst)
        session.latch.check()
        session.journal.remove()
    return len(damage), notes


def _damage(manifest: Manifest, dst: str) -> Damage:
    """The shards with a file that is missing or differs from its record, and what is wrong with each."""
    assert manifest.fields is not None
    damage: Damage = {}
    for column, table in manifest.fields.columns.items():
        for number, entry in enumerate(table):
            problem = file_problem(dst, entry.path, entry.size, entry.sha256)
            if problem:
                damage.setdefault(number, {})[column] = problem
    return damage


@dataclass(frozen=True)
class Replay:
    """The shards [first, stop) that one run writes: from SRC number `group` (0: the conversion's, then each
    append's NEW_SRC), numbered after the dataset's first `after` shards (an append's), as `part` of the
    conversion (a part, or each part of a merged dataset of parts)."""

    group: int
    first: int
    stop: int
    after: int
    part: Optional[Tuple[int, int]]


def _replays(manifest: Manifest, keywords: Dict[str, Any]) -> List[Replay]:
    """The runs that wrote the dataset's shards: the conversion (each of its parts, in a merged dataset of
    parts: its shards are named part-I-shard-K, and the parts are as many as the highest I says), then
    each append."""
    appends = manifest.source.get("appended", [])
    bounds = [int(append["first_shard"]) for append in appends] + [len(manifest.shards)]
    runs = [Replay(number + 1, first, stop, first, None)
            for number, (first, stop) in enumerate(zip(bounds, bounds[1:]))]
    found = [_PART_STEM.match(manifest.shards[number].path) for number in range(bounds[0])]
    if manifest.part is not None or not found or not all(found):
        return [Replay(0, 0, bounds[0], 0, keywords.get("part"))] + runs
    parts = [int(match.group(1)) for match in found if match is not None]
    starts = [number for number in range(bounds[0]) if number == 0 or parts[number] != parts[number - 1]]
    return [Replay(0, first, stop, 0, (parts[first], max(parts) + 1))
            for first, stop in zip(starts, starts[1:] + [bounds[0]])] + runs


def _rebuilt(manifest: Manifest, dst: str, sources: Sequence[str], replay: Replay, shards: List[int],
             damage: Damage, keywords: Dict[str, Any], stage: Path, run: RunOptions) -> List[Tuple[Path, Path]]:
    """The damaged shards of one replay written again from its SRC into stage and checked against the
    manifest: (staged file, its place in DST) of each damaged file; ConversionError naming the first
    shard that SRC no longer gives as recorded."""
    assert manifest.fields is not None
    if replay.group >= len(sources):
        raise missing_source(manifest, shards[0], manifest.shards[shards[0]].path, dst)
    source = open_replayed(sources[replay.group], keywords, manifest)
    replayed = {**keywords, "part": replay.part}
    try:
        positions = converted_positions(source, replayed) if replay.group == 0 else \
            new_positions(item_keys(source), keys_of(manifest, dst, replay.first), replayed)
        onto = dataclasses.replace(manifest, shards=ShardTable.from_entries(list(manifest.shards)[:replay.after]))
        write_replay(source, stage, positions, replayed, manifest.schema, onto,
                     until=shards[-1] - replay.first + replay.after, quiet=run.quiet)
    finally:
        source.close()
    views = column_views(manifest)
    rebuilt = []
    for number in shards:
        for column, table in manifest.fields.columns.items():
            entry, staged = table[number], stage / table[number].path
            if not staged.is_file() or (staged.stat().st_size, hash_file(staged)) != (entry.size, entry.sha256):
                why = describe_difference(get_format(manifest.format_name), views[column], dst, number, staged)
                raise ConversionError(f"shard {number} ({entry.path}) cannot be rebuilt from SRC as converted: "
                                      f"{why}; its files were left as they were", path=dst)
            if column in damage[number]:
                rebuilt.append((staged, Path(dst) / entry.path))
    return rebuilt


def _repair_tables(manifest: Manifest, dst: str) -> List[str]:
    """Each column's sample table written again from its shards when it is missing or damaged, and
    checked against the manifest's record; a note for each."""
    assert manifest.fields is not None
    notes = []
    for column, view in column_views(manifest).items():
        table = manifest.fields.sample_tables.get(column)
        problem = "" if table is None else file_problem(dst, table["path"], table["size"], table["sha256"])
        if table is None or not problem:
            continue
        if write_sample_table(dst, view, name=table["path"]) != table:
            raise ConversionError(f"written again from the shards, the sample table of {column} differs from the "
                                  "manifest's record; convert again with --overwrite", path=dst)
        notes.append(f"{table['path']} {problem}; written again")
    return notes


__all__ = ["REPAIR_DIR", "repair_fields"]
