"""The end of a Writer's run: the shards' done records -> each column's sample table, skipped.jsonl
and, last, the manifest of the dataset of fields."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..field_files import FieldFiles, table_name
from ..field_views import column_views
from ..formats import ShardFormat
from ..manifest import Manifest, ShardEntry, ShardTable
from ..schema import SampleSchema
from .conversion import ConvertReport
from .session import write_skipped
from .table_writer import write_sample_table
from .writer_plan import WriterPlan


@dataclass
class Finished:
    """What a Writer's run left: its shards' done records (in shard order) and skipped inputs."""

    dst: str
    fmt: ShardFormat
    schema: SampleSchema
    plan: WriterPlan
    records: List[Dict[str, Any]]
    skipped: List[Dict[str, Any]]
    created: str
    source: Dict[str, Any]
    reused: int
    started: float
    #: the order to record when the caller ordered the samples itself (None: the Writer's own)
    order: Optional[Dict[str, Any]] = None
    #: the identity stamped into the files (None: the plan's own)
    dataset_id: Optional[str] = None


def field_files(records: List[Dict[str, Any]], columns: List[str], first: int = 0) -> FieldFiles:
    """Each column's shard table from the shards' done records (or merged parts' entries),
    numbering samples from `first`."""
    tables: Dict[str, List[ShardEntry]] = {column: [] for column in columns}
    for record in records:
        for column in columns:
            item = record["files"][column]
            tables[column].append(ShardEntry(item["path"], record["num_samples"], first, item["size"],
                                             item["sha256"]))
        first += record["num_samples"]
    return FieldFiles({column: ShardTable.from_entries(entries) for column, entries in tables.items()}, {})


def finish_dataset(run: Finished) -> ConvertReport:
    """Write the sample tables, skipped.jsonl and the manifest (last) of a finished run."""
    columns = [column for spec in run.schema.fields for column in spec.columns]
    files = field_files(run.records, columns)
    manifest = dataset_manifest(run, files)
    write_skipped(run.dst, [{"path": item["path"], "reason": item["reason"]} for item in run.skipped])
    write_tables(run.dst, manifest)
    manifest.save(run.dst)
    return ConvertReport(dst=run.dst, format=run.fmt.name, num_samples=manifest.num_samples,
                         num_shards=len(manifest.shards), shards_written=len(manifest.shards) - run.reused,
                         shards_reused=run.reused, skipped=len(run.skipped), bytes_written=manifest.total_bytes,
                         source_bytes=0, seconds=time.monotonic() - run.started)


def write_tables(dst: str, manifest: Manifest) -> None:
    """Write each column's sample table from its shards' tables, recording them in the manifest."""
    assert manifest.fields is not None
    tables = {}
    for column, view in column_views(manifest).items():
        entry = write_sample_table(dst, view, name=table_name(column))
        if entry is not None:
            tables[column] = entry
    manifest.fields.sample_tables = tables


def dataset_manifest(run: Finished, files: FieldFiles) -> Manifest:
    """The manifest of a finished run (its sample tables are added by write_tables)."""
    from .. import __version__
    labels = [spec for spec in run.schema.fields if spec.type == "label"]
    first_schema = next(iter(WriterPlan.column_schemas(run.schema).values()))
    summary = {**run.source.get("summary", {}), "converted": int(files.first.num_samples.sum()),
               "skipped": len(run.skipped)}
    order: Optional[Dict[str, Any]] = run.order or ({"kind": "source"} if run.plan.order == "source" else
                                                    {"kind": "shuffled", "seed": run.plan.seed,
                                                     "buffer": run.plan.shuffle_buffer})
    part: Optional[Dict[str, Any]] = None if run.plan.part is None else {
        "index": run.plan.part[0], "count": run.plan.part[1],
        "plan_fingerprint": run.plan.fingerprint(run.schema, with_part=False)}
    units = files.units()
    return Manifest(format_name=run.fmt.name, format_version=run.fmt.version, schema=run.schema, shards=units,
                    fields=files, classes=list(labels[0].classes or ()) if labels else [],
                    source={**run.source, "summary": summary, "fingerprint": run.plan.fingerprint(run.schema)},
                    format_options=run.fmt.default_options(first_schema, int(units.sizes.sum())),
                    created=run.created, shardkit_version=__version__, part=part, order=order,
                    dataset_id=run.dataset_id or run.plan.dataset_id(run.schema))
