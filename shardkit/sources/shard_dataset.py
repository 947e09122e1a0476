"""A shardkit dataset as SRC: re-shard it or change its format without the raw data.

Each stored record is copied as it is (payload, label, CRC32, key); classes and schema come from the
old manifest. Shards are read one at a time through the format registry, and every record's
CRC32 is checked on the way, so a damaged sample is skipped and listed, never copied. --classes,
--keys and --fraction choose which records are copied (sources/selection.py); then the items of
this source are the kept samples, in stored order.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import CorruptSampleError, CorruptShardError, UsageError
from ..formats import SampleChecks, ShardReader, get_format, open_checked, recorded_options
from ..manifest import Manifest, load_manifest
from ..options import PlanOptions, ReshardOptions, RunOptions
from ..records import Encoded
from ..sample_table import read_labels
from .base import Converted, Outcome, SampleBytes, Skipped, Source
from .selection import Selection, select


class ShardDatasetSource(Source):
    """The samples of an existing DST, in index order."""

    kind = "shardkit_dataset"
    options_class = ReshardOptions
    #: Its samples were ordered when it was written; keeping that order keeps ds[i] the same sample
    #: across a format change. --order shuffled reorders it on request.
    default_order = "source"

    def __init__(self, root: str, manifest: Manifest, options: Optional[ReshardOptions] = None) -> None:
        self.root = root
        self.options = options or ReshardOptions()
        #: The samples kept by --classes / --keys / --fraction (None: every sample).
        self.selection: Optional[Selection] = None
        self.manifest = manifest
        self.schema = manifest.schema
        self.classes = list(manifest.classes)
        self._checks = SampleChecks(manifest, root, verify=True)
        counts = np.array([entry.num_samples for entry in manifest.shards], dtype=np.int64)
        self._starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self._starts[1:])
        #: Estimated stored bytes per sample of each shard (the manifest knows only shard sizes).
        self._per_sample = np.array([max(1, entry.size // max(1, entry.num_samples))
                                     for entry in manifest.shards], dtype=np.int64)

    @classmethod
    def claims(cls, src: str, source_options: Dict[str, Any]) -> bool:
        return os.path.isfile(os.path.join(src, "manifest.json"))

    @classmethod
    def open(cls, src: str, options: ReshardOptions, run: RunOptions) -> "ShardDatasetSource":
        """The dataset at src (its options class admits no sample option)."""
        manifest = load_manifest(src)
        if manifest.fields is not None:
            # convert copies such a dataset by itself (writing/stored_fields.py); it is never the
            # source of a dataset of one payload per sample (an append, a repair)
            raise UsageError("holds samples of named fields, not one payload per sample as the dataset "
                             "written from it would", path=src)
        get_format(manifest.format_name)
        return cls(os.path.abspath(src), manifest, options)

    def choose(self, plan: PlanOptions) -> None:
        """Apply --classes, --keys and --fraction (drawn by --seed)."""
        options = self.options
        self.uses_seed = options.fraction is not None
        self.selection = select(self.manifest.classes, self._all_labels, self._all_keys, options.classes,
                                options.keys, options.fraction, plan.seed, self.root)
        if self.selection is not None:
            self.classes = list(self.selection.classes)

    # ---- Source interface -------------------------------------------------------------
    def item_sizes(self) -> np.ndarray:
        sizes = np.repeat(self._per_sample, np.diff(self._starts))
        return sizes if self.selection is None else sizes[self.selection.kept]

    def estimated_bytes(self) -> int:
        return int(self.manifest.total_bytes)

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int],
                    order: Optional[np.ndarray] = None,
                    sample_bytes: Optional[SampleBytes] = None) -> List[Tuple[int, int]]:
        """cut_shards over per-shard average sample sizes; in source order computed run by run
        (no per-item array)."""
        if order is not None or self.selection is not None:
            return super().plan_ranges(max_bytes, max_items, order, sample_bytes or (lambda sizes: sizes))
        per_sample = self._per_sample if sample_bytes is None else sample_bytes(self._per_sample)
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
            size = int(per_sample[shard])
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
        chosen = None if self.selection is None else sorted(self.selection.record.items())
        return hashlib.sha256(repr((self.kind, body["manifest_sha256"], chosen)).encode()).hexdigest()

    def summary(self) -> Dict[str, Any]:
        facts = {"source_format": self.manifest.format_name, "source_shards": len(self.manifest.shards),
                 "source_samples": int(self._starts[-1])}
        if self.selection is not None:
            facts.update({"selected": len(self.selection.kept), "selection": dict(self.selection.record)})
        return facts

    def empty_hint(self) -> str:
        return "; --classes, --keys and --fraction together keep no sample" if self.selection is not None else ""

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        """Items [start, stop): the kept samples there, or records [start, stop) when all are kept."""
        if self.selection is not None:
            yield from self._copy_items(self.selection.kept[start:stop])
            return
        yield from self._copy_run(start, stop)

    def encode_items(self, items: np.ndarray) -> Iterator[Outcome]:
        """Items in the order asked (kept samples, when some are chosen)."""
        items = np.asarray(items, dtype=np.int64)
        yield from self._copy_items(items if self.selection is None else self.selection.kept[items])

    def _copy_run(self, start: int, stop: int) -> Iterator[Outcome]:
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

    def _copy_items(self, items: np.ndarray) -> Iterator[Outcome]:
        """Records of any sample indices: each source shard they touch is opened once, and the
        records are handed on in the order asked (one output shard's worth is held in memory)."""
        if len(items) and bool(np.all(np.diff(items) == 1)):
            yield from self._copy_run(int(items[0]), int(items[-1]) + 1)
            return
        shards = np.searchsorted(self._starts, items, side="right") - 1
        kept: Dict[int, Outcome] = {}
        for shard in np.unique(shards).tolist():
            reader = self._open(shard)
            try:
                for item in np.sort(items[shards == shard]).tolist():
                    kept[item] = self._copy(reader, shard, item - int(self._starts[shard]))
            finally:
                reader.close()
        for item in items.tolist():
            yield kept.pop(item)

    # ---- helpers ------------------------------------------------------------------
    def _all_labels(self) -> np.ndarray:
        """Every sample's label: from the sample table when the dataset has one, else from each shard."""
        if self.manifest.sample_table is not None:
            return read_labels(self.root, self.manifest.sample_table)
        labels = [np.zeros(0, dtype=np.int64)]
        for shard in range(len(self.manifest.shards)):
            reader = self._open(shard)
            try:
                labels.append(np.asarray(reader.labels(), dtype=np.int64))
            finally:
                reader.close()
        return np.concatenate(labels)

    def _all_keys(self) -> List[str]:
        """Every sample's key (a dataset written before keys: "#" and its index, as copies get)."""
        keys: List[str] = []
        for shard in range(len(self.manifest.shards)):
            reader, first = self._open(shard), int(self._starts[shard])
            try:
                for local in range(int(self._starts[shard + 1]) - first):
                    key = reader.key(local)
                    keys.append(f"#{first + local}" if key is None else key)
            finally:
                reader.close()
        return keys

    def _open(self, shard: int) -> ShardReader:
        fmt = get_format(self.manifest.format_name)
        return open_checked(fmt, self.manifest, self.root, shard, recorded_options(fmt, self.manifest, self.root),
                            role="source shard")

    def _copy(self, reader: ShardReader, shard: int, local: int) -> Outcome:
        entry = self.manifest.shards[shard]
        try:
            stored = self._checks.read(reader, shard, local)
            key = reader.key(local)
        except CorruptShardError as exc:    # a damaged record, CRC32 or label: the sample is skipped
            problem = exc.problem if isinstance(exc, CorruptSampleError) else exc.after_file()
            return Skipped(entry.path, f"sample {local} (index {entry.first_index + local}) {problem}")
        payload, label = stored.payload, stored.label
        if self.selection is not None and self.selection.relabel is not None and label >= 0:
            label = int(self.selection.relabel[label])
        # Own the bytes: the reader is closed (and its file unmapped) once this shard is done.
        payload = np.array(payload, copy=True) if self.schema.is_array else bytes(payload)
        if key is None:                 # a dataset written before keys: the sample's index in it
            key = f"#{entry.first_index + local}"
        return Converted(Encoded(payload, label, stored.crc32, key), len(payload) if isinstance(payload, bytes)
                         else int(payload.nbytes))
