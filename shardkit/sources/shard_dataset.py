"""A shardkit dataset as SRC: re-shard it or change its format without the raw data.

Each stored record is copied as it is (payload, label, CRC32); classes and schema come from the
old manifest. Shards are read one at a time through the format registry, and every record's
CRC32 is checked on the way, so a damaged sample is skipped and listed, never copied.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import CorruptSampleError, UsageError
from ..formats import SampleChecks, ShardReader, get_format, open_checked
from ..manifest import Manifest, load_manifest
from ..records import Encoded
from .base import Converted, Outcome, Skipped, Source

#: Convert options that shape how raw inputs become samples; a dataset's samples exist already.
_RAW_ONLY_OPTIONS = ("resize", "size", "quality", "labels", "path_column", "label_column", "delimiter",
                     "columns", "text_columns", "schema_file")


class ShardDatasetSource(Source):
    """The samples of an existing DST, in index order."""

    kind = "shardkit_dataset"

    def __init__(self, root: str, manifest: Manifest) -> None:
        self.root = root
        self.manifest = manifest
        self.schema = manifest.schema
        self.classes = list(manifest.classes)
        self._checks = SampleChecks(len(self.classes) if self.schema.labeled else 0, verify=True)
        counts = np.array([entry.num_samples for entry in manifest.shards], dtype=np.int64)
        self._starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self._starts[1:])
        #: Estimated stored bytes per sample of each shard (the manifest knows only shard sizes).
        self._per_sample = np.array([max(1, entry.size // max(1, entry.num_samples))
                                     for entry in manifest.shards], dtype=np.int64)

    @classmethod
    def open(cls, root: str, options: Any) -> "ShardDatasetSource":
        """The dataset at root; refuses options that only apply to raw inputs."""
        used = [name for name in _RAW_ONLY_OPTIONS if getattr(options, name, None) not in (None, False)]
        if getattr(options, "image_mode", None) not in (None, "passthrough"):
            used.insert(0, "image_mode")
        if getattr(options, "no_labels", False):
            used.append("no_labels")
        if getattr(options, "background", None) not in (None, "#ffffff"):
            used.append("background")
        if used:
            flags = ", ".join("--schema" if name == "schema_file" else "--" + name.replace("_", "-")
                              for name in used)
            raise UsageError(f"{root}: is a shardkit dataset; its samples are copied as stored, so {flags} "
                             "cannot apply (convert the raw data to change them)", path=root)
        manifest = load_manifest(root)
        get_format(manifest.format_name)
        return cls(os.path.abspath(root), manifest)

    # ---- Source interface -------------------------------------------------------------
    def item_sizes(self) -> np.ndarray:
        return np.repeat(self._per_sample, np.diff(self._starts))

    def estimated_bytes(self) -> int:
        return int(self.manifest.total_bytes)

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int]) -> List[Tuple[int, int]]:
        """cut_shards over per-shard average sample sizes, computed run by run (no per-item array)."""
        total = int(self._starts[-1])
        if not total:
            return []
        if max_bytes is None:
            step = max_items or total
            return [(start, min(start + step, total)) for start in range(0, total, step)]
        ranges: List[Tuple[int, int]] = []
        start, filled, shard = 0, 0, 0
        position = 0
        while position < total:
            while self._starts[shard + 1] <= position:
                shard += 1
            size = int(self._per_sample[shard])
            room = (max_bytes - filled) // size
            if max_items:
                room = min(room, max_items - (position - start))
            if room <= 0:
                if position == start:      # one sample larger than max_bytes: a range of its own
                    room = 1
                else:
                    ranges.append((start, position))
                    start, filled = position, 0
                    continue
            take = min(room, int(self._starts[shard + 1]) - position)
            position += take
            filled += take * size
        ranges.append((start, total))
        return ranges

    def fingerprint(self) -> str:
        body = self.manifest.to_dict()
        return hashlib.sha256(repr((self.kind, body["manifest_sha256"])).encode()).hexdigest()

    def summary(self) -> Dict[str, Any]:
        return {"source_format": self.manifest.format_name, "source_shards": len(self.manifest.shards),
                "source_samples": int(self._starts[-1])}

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        """Records [start, stop) in order, one source shard open at a time."""
        index = start
        while index < stop:
            shard = int(np.searchsorted(self._starts, index, side="right")) - 1
            end = min(stop, int(self._starts[shard + 1]))
            reader = self._open(shard)
            try:
                for local in range(index - int(self._starts[shard]), end - int(self._starts[shard])):
                    yield self._copy(reader, shard, local)
            finally:
                reader.close()
            index = end

    # ---- helpers ------------------------------------------------------------------
    def _open(self, shard: int) -> ShardReader:
        entry = self.manifest.shards[shard]
        return open_checked(get_format(self.manifest.format_name), os.path.join(self.root, entry.path), self.schema,
                            self.manifest.format_options, size=entry.size, count=entry.num_samples,
                            name=f"source shard {shard}")

    def _copy(self, reader: ShardReader, shard: int, local: int) -> Outcome:
        entry = self.manifest.shards[shard]
        try:
            stored = self._checks.read(reader, os.path.join(self.root, entry.path), entry.path, local)
        except CorruptSampleError as exc:
            problem = str(exc).replace(os.path.join(self.root, entry.path) + f": sample {local} ", "")
            return Skipped(entry.path, f"sample {local} (index {entry.first_index + local}) {problem}")
        payload = stored.payload
        # Own the bytes: the reader is closed (and its file unmapped) once this shard is done.
        payload = np.array(payload, copy=True) if self.schema.is_array else bytes(payload)
        return Converted(Encoded(payload, stored.label, stored.crc32), len(payload) if isinstance(payload, bytes)
                         else int(payload.nbytes))
