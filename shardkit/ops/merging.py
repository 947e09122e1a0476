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

from ..errors import DestinationExistsError, ManifestError, UsageError
from ..integrity import atomic_write_bytes, fsync_path
from ..manifest import RUN_SUMMARY_KEYS, SHARDS_DIR, SKIPPED_NAME, Manifest, ShardEntry, load_manifest
from ..writing.skip_log import SkipLog, merged_log
from ..writing.table_writer import write_sample_table


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
        raise DestinationExistsError("exists and is not empty; merge writes a new dataset", path=dst)
    (path / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
    if manifests[0].fields is not None:      # parts of a dataset of named fields
        from .field_merge import merge_field_parts
        return MergeReport(**merge_field_parts(ordered, dst, started))
    entries: List[ShardEntry] = []
    skipped_lists: List[List[Dict[str, Any]]] = []
    linked = copied = 0
    first = 0
    for part_dir, manifest in ordered:
        for entry in manifest.shards:
            if place_file(Path(part_dir) / entry.path, path / entry.path, entry.size):
                linked += 1
            else:
                copied += 1
            entries.append(dataclasses.replace(entry, first_index=first))
            first += entry.num_samples
        skipped_lists.append(_skipped_lines(Path(part_dir)))
    fsync_path(path / SHARDS_DIR)
    base = ordered[0][1]
    first_summary = base.source.get("summary", {})
    skip_log = merged_log(skipped_lists, int(base.part.get("plan_skipped", 0)),
                          first_summary.get("scan_skipped_by_reason"))
    summary = _merge_summaries([m for _, m in ordered], skip_log)
    merged = dataclasses.replace(base, shards=entries, part=None,
                                 source={**base.source, "summary": summary,
                                         "fingerprint": base.part["plan_fingerprint"]})
    atomic_write_bytes(path / SKIPPED_NAME, "".join(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n"
                                                    for line in skip_log.lines()).encode("utf-8", "surrogateescape"))
    merged.sample_table = write_sample_table(dst, merged)
    merged.save(dst)
    return MergeReport(dst=dst, parts=len(ordered), num_samples=merged.num_samples, num_shards=len(entries),
                       linked=linked, copied=copied, seconds=time.monotonic() - started)


def place_file(source: Path, target: Path, size: int) -> bool:
    """Hard-link a part's shard file into DST (True), or copy it there durably (False) where a
    link cannot be made; ManifestError when it is missing or not of its recorded size."""
    if not source.is_file() or source.stat().st_size != size:
        raise ManifestError("missing or not the size its part manifest says; run shardkit verify on the part",
                            path=str(source))
    try:
        os.link(source, target)
        return True
    except OSError:
        shutil.copyfile(source, target)
        fsync_path(target)
        return False


def _check_parts(parts: List[str], manifests: List[Manifest]) -> List[Any]:
    by_index: Dict[int, Any] = {}
    reference = None
    for part_dir, manifest in zip(parts, manifests):
        info = manifest.part
        if not info or "plan_fingerprint" not in info:
            raise UsageError("not a part dataset (convert it with --part I/N)", path=part_dir)
        key = (info["count"], info["plan_fingerprint"], manifest.format_name, json.dumps(manifest.classes))
        if reference is None:
            reference = key
        elif key != reference:
            raise UsageError(f"is a part of a different conversion than {parts[0]} "
                             "(other SRC, options, format or part count)", path=part_dir)
        if info["index"] in by_index:
            raise UsageError(f"part {info['index']} given twice (also {by_index[info['index']][0]})",
                             path=part_dir)
        by_index[info["index"]] = (part_dir, manifest)
    count = reference[0]
    if type(count) is not int or count < 1 \
            or any(type(index) is not int or not 0 <= index < count for index in by_index):
        raise UsageError(f"part record {manifests[0].part!r} is malformed", path=parts[0])
    # The first few missing indices, in time and memory bounded by the parts given (not by count).
    missing = list(itertools.islice((index for index in range(count) if index not in by_index), 10))
    if missing:
        more = ", ..." if count - len(by_index) > len(missing) else ""
        raise UsageError(f"merge needs all {count} parts; missing part(s) {', '.join(map(str, missing))}{more}")
    return [by_index[index] for index in range(count)]


def _skipped_lines(part_dir: Path) -> List[Dict[str, Any]]:
    """A part's skipped.jsonl lines (the scan's first, listed in every part; then its own shards')."""
    path = part_dir / SKIPPED_NAME
    try:
        text = path.read_bytes().decode("utf-8", "surrogateescape") if path.is_file() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise ManifestError(f"is not a list of JSON lines ({exc})", path=str(path)) from None


def _merge_summaries(manifests: List[Manifest], skip_log: SkipLog) -> Dict[str, Any]:
    """The scan's summary (the same in every part) with the shard counts summed over the parts:
    what one run over the whole plan records."""
    total: Dict[str, Any] = dict(manifests[0].source.get("summary", {}))
    for key in RUN_SUMMARY_KEYS:
        values = [m.source.get("summary", {}).get(key) for m in manifests]
        if all(isinstance(value, int) for value in values):
            total[key] = sum(values)
        elif all(isinstance(value, dict) for value in values):
            bucket: Dict[str, int] = {}
            for value in values:
                for sub, number in value.items():
                    bucket[sub] = bucket.get(sub, 0) + number
            total[key] = dict(sorted(bucket.items()))
    total["skipped"] = skip_log.total
    total["skipped_by_reason"] = skip_log.by_reason()
    total.pop("scan_skipped_by_reason", None)         # a part's record of the scan's own share
    return total
