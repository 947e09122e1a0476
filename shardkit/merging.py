"""merge(): join the part datasets of a `--part I/N` conversion into one dataset, in the same
sample order as a single-machine run. Shards are hard-linked where possible, else copied."""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Sequence

from .errors import DestinationExistsError, ManifestError, UsageError
from .integrity import atomic_write_bytes, fsync_path
from .manifest import SHARDS_DIR, SKIPPED_NAME, Manifest, ShardEntry, load_manifest


@dataclass
class MergeReport:
    """What merge() did."""

    dst: str
    parts: int
    num_samples: int
    num_shards: int
    linked: int
    copied: int
    seconds: float

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def merge(parts: Sequence[str], dst: str) -> MergeReport:
    """Check that parts are all N parts of one plan, then write DST from them (manifest last)."""
    started = time.monotonic()
    if not parts:
        raise UsageError("merge needs at least one part dataset")
    manifests = [load_manifest(part) for part in parts]
    ordered = _check_parts(list(parts), manifests)
    path = Path(dst)
    if path.exists() and (not path.is_dir() or os.listdir(path)):
        raise DestinationExistsError(f"{dst}: exists and is not empty; merge writes a new dataset", path=dst)
    (path / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
    entries: List[ShardEntry] = []
    skipped_text = b""
    linked = copied = 0
    first = 0
    for part_dir, manifest in ordered:
        for entry in manifest.shards:
            source, target = Path(part_dir) / entry.path, path / entry.path
            if not source.is_file() or source.stat().st_size != entry.size:
                raise ManifestError(f"{source}: missing or not the size its part manifest says; "
                                    "run shardkit verify on the part", path=str(source))
            try:
                os.link(source, target)
                linked += 1
            except OSError:
                shutil.copyfile(source, target)
                fsync_path(target)
                copied += 1
            entries.append(dataclasses.replace(entry, first_index=first))
            first += entry.num_samples
        skipped = Path(part_dir) / SKIPPED_NAME
        if skipped.is_file():
            skipped_text += skipped.read_bytes()
    fsync_path(path / SHARDS_DIR)
    base = ordered[0][1]
    merged = dataclasses.replace(base, shards=entries, part=None,
                                 source={**base.source, "summary": _sum_summaries(m for _, m in ordered),
                                         "fingerprint": base.part["plan_fingerprint"]})
    atomic_write_bytes(path / SKIPPED_NAME, skipped_text)
    merged.save(dst)
    return MergeReport(dst=dst, parts=len(ordered), num_samples=merged.num_samples, num_shards=len(entries),
                       linked=linked, copied=copied, seconds=time.monotonic() - started)


def _check_parts(parts: List[str], manifests: List[Manifest]) -> List[Any]:
    by_index: Dict[int, Any] = {}
    reference = None
    for part_dir, manifest in zip(parts, manifests):
        info = manifest.part
        if not info or "plan_fingerprint" not in info:
            raise UsageError(f"{part_dir}: not a part dataset (convert it with --part I/N)", path=part_dir)
        key = (info["count"], info["plan_fingerprint"], manifest.format_name, json.dumps(manifest.classes))
        if reference is None:
            reference = key
        elif key != reference:
            raise UsageError(f"{part_dir}: is a part of a different conversion than {parts[0]} "
                             "(other SRC, options, format or part count)", path=part_dir)
        if info["index"] in by_index:
            raise UsageError(f"{part_dir}: part {info['index']} given twice (also {by_index[info['index']][0]})",
                             path=part_dir)
        by_index[info["index"]] = (part_dir, manifest)
    count = reference[0]
    if type(count) is not int or count < 1 \
            or any(type(index) is not int or not 0 <= index < count for index in by_index):
        raise UsageError(f"{parts[0]}: part record {manifests[0].part!r} is malformed", path=parts[0])
    # The first few missing indices, in time and memory bounded by the parts given (not by count).
    missing = list(itertools.islice((index for index in range(count) if index not in by_index), 10))
    if missing:
        more = ", ..." if count - len(by_index) > len(missing) else ""
        raise UsageError(f"merge needs all {count} parts; missing part(s) {', '.join(map(str, missing))}{more}")
    return [by_index[index] for index in range(count)]


def _sum_summaries(manifests: Any) -> Dict[str, Any]:
    total: Dict[str, Any] = {}
    for manifest in manifests:
        for key, value in manifest.source.get("summary", {}).items():
            if isinstance(value, int):
                total[key] = total.get(key, 0) + value
            elif isinstance(value, dict):
                bucket = total.setdefault(key, {})
                for sub, number in value.items():
                    bucket[sub] = bucket.get(sub, 0) + number
            else:
                total.setdefault(key, value)
    return total
