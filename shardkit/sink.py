"""The shard sink: writes one planned shard through a format, durably, and records it as done.

It owns everything a format would otherwise copy: temp name, fsync, rename, hashing,
the ShardEntry facts, and the skipped inputs of that shard.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .errors import ConversionError
from .formats import get_format
from .integrity import durable_replace, hash_file
from .journal import Journal
from .manifest import SHARDS_DIR
from .plan import ShardTask
from .schema import SampleSchema
from .sources.base import Skipped, Source

ProgressFn = Callable[[int, int], None]


@dataclass
class SinkContext:
    """What every shard write needs; sent once to each worker process."""

    dst: str
    source: Source
    format_name: str
    schema: SampleSchema
    format_options: Dict[str, Any]
    on_error: str = "skip"
    max_errors: Optional[int] = None


@dataclass
class ShardResult:
    """A finished shard: its file facts, skipped inputs and summary counts (the done record)."""

    shard: int
    path: str
    num_samples: int
    size: int
    sha256: str
    source_bytes: int = 0
    skipped: List[Dict[str, Any]] = field(default_factory=list)
    tags: Dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ShardResult":
        return cls(**data)


def shard_relpath(task: ShardTask, extension: str) -> str:
    """shards/shard-00000.h5 style path relative to DST."""
    return f"{SHARDS_DIR}/{task.name}{extension}"


def write_shard(ctx: SinkContext, task: ShardTask, progress: Optional[ProgressFn] = None) -> ShardResult:
    """Encode items [start, stop) into DST/shards/<stem>; temp name, fsync, rename, hash, record."""
    fmt = get_format(ctx.format_name)
    rel = shard_relpath(task, fmt.extension)
    final = Path(ctx.dst) / rel
    tmp = final.with_name(f".{final.name}.tmp")
    if tmp.exists():
        tmp.unlink()
    skipped: List[Skipped] = []
    tags: Counter = Counter()
    count = source_bytes = 0
    writer = fmt.open_writer(str(tmp), ctx.schema, ctx.format_options)
    try:
        for outcome in ctx.source.encode_range(task.start, task.stop):
            if isinstance(outcome, Skipped):
                skipped.append(outcome)
                if ctx.on_error == "fail":
                    raise ConversionError(f"{outcome.message()} (--on-error fail)", path=outcome.path)
                if ctx.max_errors is not None and len(skipped) > ctx.max_errors:
                    raise ConversionError(f"more than {ctx.max_errors} inputs failed (--max-errors); "
                                          f"last: {outcome.message()}", path=outcome.path)
                if progress:
                    progress(1, 0)
                continue
            writer.append(outcome.sample)
            count += 1
            source_bytes += outcome.source_bytes
            if outcome.tag:
                tags[outcome.tag] += 1
            if progress:
                progress(1, outcome.source_bytes)
        writer.close()
    except BaseException:
        writer.abort()
        if tmp.exists():
            tmp.unlink()
        raise
    durable_replace(tmp, final)
    result = ShardResult(shard=task.shard, path=rel, num_samples=count, size=os.path.getsize(final),
                         sha256=hash_file(final), source_bytes=source_bytes,
                         skipped=[item.to_dict() for item in skipped], tags=dict(sorted(tags.items())))
    Journal(ctx.dst).write_done(task.name, result.to_dict())
    return result
