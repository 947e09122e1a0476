"""`convert NEW_SRC DST --append` of a dataset of named fields converted from files (a sidecar tree,
a table with an image column): NEW_SRC's items whose key the dataset does not hold are converted
with the dataset's recorded options into DST/.shardkit/append (field_replay.py), then published as
an image tree's append is (append.py): the staged files renamed into shards/, each column's sample
table written under a new name, the manifest last. An item whose key the dataset holds is skipped
when every column's stored value (bytes, presence) is the one it encodes to, and refused otherwise.
A label field's classes grow at their end; the other fields must be the dataset's."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

from ..codecs.fields import ABSENT, FieldEncoder
from ..errors import ConversionError, SampleError, UsageError
from ..field_files import FieldFiles, table_name
from ..field_views import column_views
from ..formats import get_format
from ..formats.checked import open_checked, recorded_options
from ..manifest import MANIFEST_NAME, Manifest, ShardEntry, ShardTable, load_manifest
from ..options import RunOptions
from ..runtime.fault_points import kill_point
from ..schema import SampleSchema
from ..sources.fields import FieldItem, FieldSource
from .append import append_report, drop_older_tables, join_skipped, move_staged, under_lock
from .append_inputs import ExistingSample, dataset_keys
from .conversion import shown_source
from .field_convert import READ_BATCH
from .field_records import encode_record
from .field_replay import item_keys, new_positions, open_replayed, write_replay
from .journal import APPEND_DIR, JOURNAL_DIR, Journal
from .session import creation_time
from .table_writer import joined_sample_table, write_sample_table


def append_fields(src: str, dst: str, manifest: Manifest, keywords: Dict[str, Any], run: RunOptions,
                  started: float) -> Any:
    """Append NEW_SRC's new items to the dataset of fields in DST; its ConvertReport."""
    source = open_replayed(src, keywords, manifest)
    try:
        schema = grown_schema(manifest.schema, source.fields, src)
        held = dataset_keys(next(iter(column_views(manifest).values())), dst)
        keys = item_keys(source)
        already = _already_in_dst(source, keys, held, manifest, dst, schema, src)
        notes = [f"{len(already)} inputs already in DST (same key and content) were skipped"] if already else []
        positions = new_positions(keys, set(held), keywords)
        if not len(positions):
            return append_report(manifest, dst, started, len(manifest.shards), notes + ["nothing new to append"])
        fingerprint = _fingerprint(manifest, src, keys, positions, schema)
        stage = Path(dst) / JOURNAL_DIR / APPEND_DIR

        def stage_and_publish() -> Manifest:
            staged = _finished_stage(stage, fingerprint) or write_replay(
                source, stage, positions, keywords, schema, manifest, quiet=run.quiet,
                record={"kind": source.kind, "path": shown_source(src), "summary": source.summary(),
                        "append_fingerprint": fingerprint})
            assert staged is not None
            return _publish(dst, stage, manifest, staged, src, len(already))
        combined = under_lock(dst, stage_and_publish)
    finally:
        source.close()
    return append_report(combined, dst, started, len(manifest.shards), notes)


def grown_schema(old: SampleSchema, new: Tuple[Any, ...], src: str) -> SampleSchema:
    """The dataset's schema with the classes NEW_SRC adds to a label field after its own (sorted as
    a conversion sorts them); UsageError naming a field NEW_SRC has that the dataset has not, or
    holds as another type, or a required field of the dataset that NEW_SRC has not at all."""
    mine = {spec.name: spec for spec in old.fields}
    fields = []
    for spec in new:
        if spec.name not in mine or mine[spec.name].type != spec.type:
            was = f"a {mine[spec.name].type} field" if spec.name in mine else "not a field"
            raise UsageError(f"field {spec.name!r} ({spec.type}) is {was} of the dataset "
                             f"({', '.join(mine)}); an append takes inputs of the dataset's fields", path=src)
    names = {other.name for other in new}
    missing = [spec.name for spec in old.fields if not spec.optional and spec.name not in names]
    if missing:
        raise UsageError(f"has no {missing[0]!r} field, which every sample of the dataset holds; an append takes "
                         "inputs of the dataset's fields", path=src)
    for spec in old.fields:
        grown = [name for name in next((other.classes or () for other in new if other.name == spec.name), ())
                 if name not in (spec.classes or ())]
        fields.append(dataclasses.replace(spec, classes=tuple(spec.classes or ()) + tuple(grown)) if grown else spec)
    return SampleSchema.of_fields(fields)


def _already_in_dst(source: FieldSource, keys: List[str], held: Dict[str, ExistingSample], manifest: Manifest,
                    dst: str, schema: SampleSchema, src: str) -> List[str]:
    """The keys of NEW_SRC's items (keys: every item's) that the dataset holds with the same content (every
    column's stored value is the one the item encodes to); ConversionError naming the first it holds with other
    content."""
    candidates = [item for item, key in enumerate(keys) if key in held]
    if not candidates:
        return []
    encoders = {spec.name: FieldEncoder(spec) for spec in schema.fields}
    fmt = get_format(manifest.format_name)
    views = list(column_views(manifest).values())
    options = recorded_options(fmt, manifest, dst)
    readers: Dict[Tuple[int, int], Any] = {}
    try:
        for first in range(0, len(candidates), READ_BATCH):
            batch = candidates[first:first + READ_BATCH]
            for number, item in zip(batch, source.read_many(batch)):
                where = held[keys[number]]
                if not _same(item, where, encoders, views, readers, (fmt, dst, options)):
                    raise ConversionError(f"{keys[number]!r} is already in DST (sample {where.index}) with other "
                                          "content; an append adds new inputs only (give it another name, or "
                                          "convert again)", path=src)
    finally:
        for reader in readers.values():
            reader.close()
    return [key for key in keys if key in held]


def _same(item: Any, where: ExistingSample, encoders: Dict[str, FieldEncoder], views: List[Manifest],
          readers: Dict[Tuple[int, int], Any], opening: Tuple[Any, str, Any]) -> bool:
    """Whether an item encodes to the values the dataset stores for its key: every column's bytes and
    presence (an item that does not convert is not the same)."""
    if not isinstance(item, FieldItem):
        return False
    try:
        record = encode_record(encoders, item.sample, item.key, None)
    except SampleError:
        return False
    fmt, dst, options = opening
    for column, view in enumerate(views):
        if (column, where.shard) not in readers:
            readers[column, where.shard] = open_checked(fmt, view, dst, where.shard, options)
        stored = readers[column, where.shard].read(where.local)
        absent = column in (record[-2] or ())
        if (stored.label == ABSENT) != absent or _bytes(stored.payload) != _bytes(record[column]):
            return False
    return True


def _bytes(payload: Any) -> bytes:
    return payload.tobytes() if isinstance(payload, np.ndarray) else bytes(payload)


def _fingerprint(manifest: Manifest, src: str, keys: List[str], positions: np.ndarray, schema: SampleSchema) -> str:
    """What the staged append is of: the dataset (its manifest), NEW_SRC and the items chosen, the schema."""
    record = {"onto": manifest.to_dict()["manifest_sha256"], "src": shown_source(src),
              "items": [keys[item] for item in positions.tolist()], "schema": schema.to_dict()}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _finished_stage(stage: Path, fingerprint: str) -> "Manifest | None":
    """The staged dataset of this very append, finished (killed while publishing), or None."""
    if (stage / MANIFEST_NAME).is_file() and not Journal(str(stage)).exists():
        staged = load_manifest(str(stage))
        if staged.source.get("append_fingerprint") == fingerprint:
            return staged
    return None


def _publish(dst: str, stage: Path, old: Manifest, staged: Manifest, src: str, already: int) -> Manifest:
    """Move the staged files into shards/, then write each column's new sample table, skipped.jsonl and,
    last, the manifest."""
    assert staged.fields is not None and old.fields is not None
    move_staged(dst, str(stage), ((entry.path, entry.size, entry.sha256)
                                  for table in staged.fields.columns.values() for entry in table))
    combined = _combined(old, staged, src, already)
    kill_point("append-publish", dst)           # tests only: killed with the files moved, no manifest yet
    tables = {}
    for column, view in column_views(combined).items():
        if column in old.fields.sample_tables or column in staged.fields.sample_tables:
            name = table_name(column, combined.num_samples)
            parts = [(dst, old.fields.sample_tables.get(column)), (str(stage), staged.fields.sample_tables.get(column))]
            entry = joined_sample_table(dst, name, parts) or write_sample_table(dst, view, name)
            if entry is not None:
                tables[column] = entry
    assert combined.fields is not None
    combined.fields.sample_tables = tables
    join_skipped(dst, str(stage))
    combined.save(dst)
    drop_older_tables(dst, old, combined)
    return combined


def _combined(old: Manifest, staged: Manifest, src: str, already: int) -> Manifest:
    """The manifest of the old shards followed by the staged ones, with the staged (grown) schema."""
    assert staged.fields is not None and old.fields is not None
    offset = old.num_samples
    columns = {column: ShardTable.from_entries(list(table) + [
        ShardEntry(entry.path, entry.num_samples, offset + entry.first_index, entry.size, entry.sha256)
        for entry in staged.fields.columns[column]]) for column, table in old.fields.columns.items()}
    files = FieldFiles(columns, {})
    summary = dict(old.source.get("summary", {}))
    added = staged.source.get("summary", {})
    for name in ("converted", "skipped"):
        summary[name] = int(summary.get(name, 0)) + int(added.get(name, 0))
    history: List[Dict[str, Any]] = list(old.source.get("appended", []))
    history.append({"path": shown_source(src), "fingerprint": staged.source.get("append_fingerprint"),
                    "first_shard": len(old.shards), "shards": len(staged.shards), "samples": staged.num_samples,
                    "already_in_dst": already, "skipped": int(added.get("skipped", 0)), "appended": creation_time()})
    source = {**old.source, "summary": summary, "appended": history}
    return dataclasses.replace(old, shards=files.units(), fields=files, schema=staged.schema,
                               classes=list(staged.classes), source=source, sample_table=None)


__all__ = ["append_fields", "grown_schema"]
