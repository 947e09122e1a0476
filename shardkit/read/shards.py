"""The stored records of a dataset's shards in one process: a global index to (shard, local), and
one-sample and batched reads with their checks, through the dataset's ShardCache (read/cache.py),
which owns every open shard. ShardDataset turns these records into samples."""
from __future__ import annotations

import bisect
import dataclasses
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, TypeVar, Union

import numpy as np

from ..errors import UsageError
from ..formats import SampleChecks, check_version, get_format, recorded_options
from ..formats.base import physical_memory
from ..formats.checked import CheckedShards
from ..manifest import Manifest, load_manifest
from ..records import Encoded
from ..remote.cache import RemoteShardCache
from .budget import process_budget
from .cache import ShardCache
from .indices import distinct, sample_index, sample_indices
from .remote_files import REMOTE_OPTIONS, remote_files

_Records = TypeVar("_Records", bound="ShardRecords")

#: Samples per shard from which a batch is read in one pass per shard (read_many) rather than
#: sample by sample: below it the grouping costs more than a format's one-pass read saves.
MIN_GROUP = 16


class ShardRecords:
    """Random access to the stored record (Encoded) of every sample of a shardkit dataset.

    Shards are opened lazily per process through the dataset's ShardCache, at most
    `max_open_shards` at once (default from the process's descriptor and map limits); the cache
    never crosses a pickle, and a fork keeps only what a fork copies whole. `open_shards()` opens
    them ahead for DataLoader workers forked later; `close()` (or a `with` block) closes them, and
    reading again opens them anew.

    A dataset at a URL is read through `remote_cache` (a RemoteShardCache in cache_dir, under
    cache_limit): each shard is fetched and checked on its first use, and pinned there while open,
    so at most as many shards are open per process as cache_limit holds.
    """

    #: The format a subclass insists on (None: any).
    format_name: Optional[str] = None
    #: Keywords taken besides the format's reader options (suggested when one is misspelt).
    keywords: Sequence[str] = ("verify_checksums", "max_open_shards", *REMOTE_OPTIONS)

    def __init__(self, root: "str | os.PathLike[str]", verify_checksums: "bool | str" = False,
                 max_open_shards: Optional[int] = None, _manifest: Optional[Manifest] = None,
                 cache_dir: "str | os.PathLike[str] | None" = None, cache_limit: Union[int, str, None] = None,
                 storage_options: Optional[Mapping[str, Any]] = None, _remote: Optional[RemoteShardCache] = None,
                 **format_options: Any) -> None:
        #: The local cache of a dataset at a URL (None for a local dataset).
        self.remote_cache = _remote or remote_files(root, cache_dir, cache_limit, storage_options)
        if self.remote_cache is not None:
            self.root = self.remote_cache.location.shown
            _manifest = self.remote_cache.manifest
        else:
            self.root = os.path.abspath(os.fspath(root))
        self.manifest: Manifest = _manifest if _manifest is not None else load_manifest(self.root)
        if self.manifest.fields is not None:
            raise UsageError("holds samples of named fields; open it with shardkit.open_dataset", path=self.root)
        if self.format_name is not None and self.manifest.format_name != self.format_name:
            raise UsageError(f"holds {self.manifest.format_name} shards, not {self.format_name}; "
                             "use shardkit.open_dataset to pick the right reader", path=self.root)
        fmt = get_format(self.manifest.format_name)
        check_version(fmt, self.manifest.format_version, self.root)
        fmt.reader_options.from_dict(format_options, f"open_dataset ({fmt.name})", also=self.keywords)
        options = dataclasses.replace(recorded_options(fmt, self.manifest, self.root), **format_options)
        if verify_checksums not in (False, True, "full"):
            raise UsageError(f"verify_checksums must be False, True or 'full', not {verify_checksums!r}")
        shards = self.manifest.shards
        if max_open_shards is None:
            max_open_shards = default_budget(verify_checksums == "full", shards.sizes)
        if max_open_shards < 1:
            raise UsageError("max_open_shards must be at least 1")
        if self.remote_cache is not None and self.remote_cache.limit < int(shards.sizes.sum()):
            # open shards stay in the cache: no more of them than the limit holds
            max_open_shards = min(max_open_shards, max(1, self.remote_cache.limit // int(np.max(shards.sizes))))
        self.verify_checksums = verify_checksums
        self.max_open_shards = max_open_shards
        self._checks = SampleChecks(self.manifest, self.root, bool(verify_checksums))
        #: shard_starts[k] is the global index of shard k's first sample; the last entry is len(self).
        self.shard_starts = np.zeros(len(shards) + 1, dtype=np.int64)
        np.cumsum(shards.num_samples, out=self.shard_starts[1:])
        self._starts: List[int] = self.shard_starts.tolist()   # one per shard; bisect on a list is fast
        self._length = int(self.shard_starts[-1])
        #: Samples in every shard but the last (which holds no more), or 0 when they differ: then a
        #: global index finds its shard by a division, touching no per-shard table.
        self._per_shard = _uniform_count(shards.num_samples)
        # Fixed-shape rows with labels and CRC32s in the sample table need nothing else of a shard.
        by_rows = self.manifest.sample_table is not None and self.manifest.schema.is_array and len(shards)
        self._shards = CheckedShards(fmt, self.manifest, self.root, options, verify_checksums == "full",
                                     files=self.remote_cache)
        #: This dataset's open shards in this process: the one owner of them (read/cache.py).
        self.shard_cache = ShardCache(self._shards, len(shards), max_open_shards,
                                      int(np.max(shards.num_samples)) if by_rows else 0)

    def __len__(self) -> int:
        return self._length

    def locate(self, index: Any) -> "tuple[int, int]":
        """(shard number, index within shard) of a global index."""
        return self._locate(sample_index(index, self._length))

    def _locate(self, index: int) -> "tuple[int, int]":
        """locate for an index already checked by sample_index (the per-sample path checks once)."""
        per_shard = self._per_shard
        if per_shard:
            shard = index // per_shard
            return shard, index - shard * per_shard
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, index - self._starts[shard]

    def open_shards(self) -> int:
        """Open and check the first max_open_shards shards (every shard when they fit) in this
        process now, as their first reads would; how many are open. DataLoader workers forked
        afterwards inherit them (fixed-shape rows and readers that are one read-only map), instead
        of opening each shard again every epoch when their workers are not persistent."""
        return self.shard_cache.prepare()

    def prefetch(self, shards: Iterable[int]) -> None:
        """Fetch these shards, the ones read next, into the local cache in the background (a
        dataset at a URL; nothing for a local one). ShardStream and ShardAwareSampler call it."""
        if self.remote_cache is not None:
            self.remote_cache.prefetch(shards)

    def key(self, index: Any) -> Optional[str]:
        """The source key of a sample: its path relative to SRC (image trees), "file:line" (table
        rows); None for a dataset written before keys were stored (format version 1)."""
        shard, local = self.locate(index)
        with self.shard_cache as cache:
            return cache.reader(shard).key(local)

    def read_encoded(self, index: Any) -> Encoded:
        """The stored record of a global index (CRC and label range checked when verify_checksums)."""
        return self._read(sample_index(index, self._length))

    def _read(self, index: int) -> Encoded:
        """read_encoded for an index already checked by sample_index (the per-sample path)."""
        shard, local = self._locate(index)
        cache = self.shard_cache
        payload, table = cache.row(shard, local), cache.table
        if payload is not None and table is not None:     # located rows: label and CRC32 from the sample table
            encoded = Encoded(payload, table.labels.item(index), table.crcs.item(index))
            return self._checks.check(encoded, shard, local, index) if self.verify_checksums else encoded
        with cache:
            return self._checks.read(cache.reader(shard), shard, local, index, cache.table)

    def read_encoded_many(self, indices: Sequence[Any]) -> List[Encoded]:
        """The stored records of global indices, in their order: one backend pass per shard."""
        return self._read_many(sample_indices(indices, self._length))

    def _read_many(self, wanted: np.ndarray) -> List[Encoded]:
        """read_encoded_many for indices already checked by sample_indices. A batch of small
        groups per shard (uniform order: a batch of 256 over 100 shards meets each about 2.5 times)
        is read sample by sample, which costs less than grouping it (benchmarks/batch_grouping.py).
        A batch over more shards than the cache keeps open returns copies, so that it never keeps
        more shard maps alive than max_open_shards."""
        self.shard_cache.check_files()
        shards = np.searchsorted(self.shard_starts, wanted, side="right") - 1
        touched = distinct(shards)
        count = len(touched)
        self.shard_cache.open_rows(touched.tolist())
        if len(wanted) < MIN_GROUP * count:
            out = [self._read(index) for index in wanted.tolist()]
        else:
            out = self._read_groups(wanted, shards)
        return [_owned(one) for one in out] if count > self.shard_cache.capacity else out

    def _read_groups(self, wanted: np.ndarray, shards: np.ndarray) -> List[Encoded]:
        """A batch grouped by shard: one read_many call per shard of more than one sample."""
        groups: Dict[int, List[int]] = {}
        for position, shard in enumerate(shards.tolist()):
            groups.setdefault(shard, []).append(position)
        globals_ = wanted.tolist()
        out: List[Any] = [None] * len(globals_)
        cache = self.shard_cache
        for shard, positions in groups.items():
            if len(positions) == 1:
                out[positions[0]] = self._read(globals_[positions[0]])
                continue
            start, picked = self._starts[shard], [globals_[position] for position in positions]
            with cache:
                encoded = self._checks.read_many(cache.reader(shard), shard, [index - start for index in picked],
                                                 picked)
            for position, one in zip(positions, encoded):
                out[position] = one
        return out

    def targets(self) -> np.ndarray:
        """All labels in index order: from the sample table once its sha256 matches the manifest
        (no shard opened), else from each shard's label table (no payloads)."""
        if not self._length:
            return np.zeros(0, dtype=np.int64)
        if self.manifest.sample_table is not None:
            return np.asarray(self._shards.labels())
        with self.shard_cache as cache:      # no other thread closes a reader before its labels are copied
            return np.concatenate([cache.reader(shard).labels() for shard in range(len(self._starts) - 1)])

    def close(self) -> None:
        """Close this dataset's shards in this process (and stop its prefetching)."""
        self.shard_cache.close()
        if self.remote_cache is not None:
            self.remote_cache.close()

    def __enter__(self: _Records) -> _Records:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        return dict(self.__dict__)      # the cache pickles as a new, empty one (ShardCache.__reduce__)


def _owned(encoded: Encoded) -> Encoded:
    """The record with a payload of its own (not a view of a shard's map)."""
    payload = encoded.payload
    if isinstance(payload, np.ndarray) and payload.base is not None:
        return Encoded(payload.copy(), encoded.label, encoded.crc32)
    if isinstance(payload, memoryview):
        return Encoded(payload.tobytes(), encoded.label, encoded.crc32)
    return encoded


def default_budget(full: bool, sizes: np.ndarray) -> int:
    """The process's budget; with verify_checksums="full" (a private copy of each open shard in
    memory) also no more of the largest shards than half of physical memory holds."""
    budget = process_budget()
    if full and len(sizes):
        memory = physical_memory() or (8 << 30)
        budget = max(1, min(budget, memory // 2 // max(1, int(np.max(sizes)))))
    return budget


def _uniform_count(counts: np.ndarray) -> int:
    """The sample count of every shard but the last when they share it (the last holding at most
    as many), else 0."""
    counts = np.asarray(counts, dtype=np.int64)
    if not len(counts) or counts[0] <= 0 or (counts[:-1] != counts[0]).any() or counts[-1] > counts[0]:
        return 0
    return int(counts[0])
