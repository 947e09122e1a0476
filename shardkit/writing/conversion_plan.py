"""The conversion plan: everything a run will write, worked out from the opened source and the plan
options before DST is touched. Pure: no file is written, so a plan can be made, compared with a
finished dataset's fingerprint and thrown away."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import EmptySourceError, UsageError
from ..formats import ShardFormat, get_format
from ..options import PlanOptions, RunOptions
from ..schema import SampleSchema
from ..sources import Source
from .plan import ShardTask, make_tasks, planned_order, sample_order
from .sink import SinkContext, shard_relpath


@dataclass(frozen=True)
class ConversionPlan:
    """The format, the stored schema, the sample order, every planned shard range, the shards of
    this run (its --part) and the fingerprints naming them."""

    fmt: ShardFormat
    schema: SampleSchema
    order: Dict[str, Any]
    #: source item of each plan position (--order shuffled); None: source order
    permutation: Optional[np.ndarray]
    ranges: List[Tuple[int, int]]
    tasks: List[ShardTask]
    part: Optional[Tuple[int, int]]
    readahead: Optional[bool]
    #: the whole plan's fingerprint (every part of it shares it: merge checks it)
    plan_fingerprint: str
    #: this run's fingerprint (the part's), recorded in the journal and the manifest
    fingerprint: str
    #: the identity stamped into every shard and the manifest: derived from the whole plan's
    #: fingerprint (plan_identity), or the existing dataset's when repairing or appending to it
    dataset_id: str

    def task_of(self, path: str) -> Optional[ShardTask]:
        """The planned task writing the shard at path (relative to DST), if any."""
        for task in self.tasks:
            if shard_relpath(task, self.fmt.extension) == path:
                return task
        return None

    def sink_context(self, dst: str, source: Source, run: RunOptions) -> SinkContext:
        """What every shard write of this plan needs."""
        ctx = SinkContext(dst=dst, source=source, format_name=self.fmt.name, schema=self.schema,
                          format_options=self.fmt.default_options(self.schema, source.estimated_bytes()),
                          writer_options=self.fmt.writer_options(),
                          on_error=run.on_error, max_errors=run.max_errors, error_limit=run.max_errors,
                          order=self.permutation, dataset_id=self.dataset_id)
        if self.readahead is not None:
            ctx.format_options["readahead"] = self.readahead
        return ctx


def plan_conversion(source: Source, options: PlanOptions, src: str) -> ConversionPlan:
    """The plan of converting the opened source with these options; UsageError for options the
    format refuses, EmptySourceError when SRC holds nothing to convert."""
    fmt = get_format(options.format)
    schema = dataclasses.replace(source.schema, compression=options.compression,
                                 compression_level=options.compression_level)
    fmt.check(schema)
    if options.readahead is not None and "readahead" not in fmt.reader_options.names():
        raise UsageError(f"--readahead/--no-readahead does not apply to {fmt.name} shards")
    order = sample_order(options.order or source.default_order, options.seed, seed_used=source.uses_seed)
    max_bytes = options.max_shard_bytes
    budget = None if max_bytes is None else max(1, max_bytes - fmt.fixed_bytes)

    def stored_bytes(sizes: Any) -> Any:
        return fmt.sample_bytes(schema, sizes)

    ranges = source.plan_ranges(budget, options.samples_per_shard, None, stored_bytes)
    if not ranges:
        raise EmptySourceError(f"no input to convert ({_describe_summary(source.summary())})"
                               f"{source.empty_hint()}", path=src)
    permutation = planned_order(ranges[-1][1], order)
    if permutation is not None:
        ranges = source.plan_ranges(budget, options.samples_per_shard, permutation, stored_bytes)
    source_fingerprint = source.fingerprint()       # hashes every item's path, size and mtime: once
    part = options.part_tuple

    def fingerprint(of_part: Optional[Tuple[int, int]]) -> str:
        """Digest of what the output depends on; with None it names the whole plan (for merge)."""
        record = {"source": source_fingerprint, "format": options.format, "schema": schema.to_dict(),
                  "ranges": ranges, "order": order, "part": of_part}
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()

    return ConversionPlan(fmt=fmt, schema=schema, order=order, permutation=permutation, ranges=ranges,
                          tasks=make_tasks(ranges, part), part=part,
                          readahead=None if options.readahead is None else bool(options.readahead),
                          plan_fingerprint=fingerprint(None), fingerprint=fingerprint(part),
                          dataset_id=plan_identity(fingerprint(None)))


def plan_identity(plan_fingerprint: str) -> str:
    """A new dataset's dataset_id: derived from the whole plan's fingerprint, so output stays
    byte-identical run after run and every --part of one plan shares it; another SRC or other
    options give another one."""
    return hashlib.sha256(f"shardkit dataset {plan_fingerprint}".encode()).hexdigest()[:32]


def _describe_summary(summary: Dict[str, Any]) -> str:
    return ", ".join(f"{key.replace('_', ' ')}: {value}" for key, value in summary.items()
                     if isinstance(value, int)) or "empty"


__all__ = ["ConversionPlan", "plan_conversion"]
