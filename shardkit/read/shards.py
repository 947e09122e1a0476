"""The stored records of a dataset's shards in one process: a global index to (shard, local), the
dataset's own LRU of readers opened through the checked path, and one-sample and batched reads
with their checks. ShardDataset turns these records into samples."""
from __future__ import annotations

import bisect
import dataclasses
import os
import weakref
import zlib
from typing import Any, Dict, List, Optional, Sequence, TypeVar

import numpy as np

from ..codecs.row_crc import row_crc32
from ..errors import CorruptSampleError, CorruptShardError, ShardkitError, UsageError
from ..formats import (SampleChecks, ShardFormat, ShardReader, check_reader, check_version, get_format,
                       open_shard_file, reader_of, recorded_options)
from ..integrity import ShardFolder, hash_shard_file
from ..manifest import SHARDS_DIR, Manifest, load_manifest
from ..records import Encoded
from ..sample_table import SampleTable, read_labels
from .handles import ShardHandles, process_budget
from .indices import sample_index, sample_indices
from .openfiles import OPEN_FILES


_Records = TypeVar("_Records", bound="ShardRecords")

#: The largest run of rows (bytes) of a shard that _place_run maps and checks whole (CRC32) when it
#: opens: below it a shard's open is an open, a pread and a map (tens of us, where a reader takes
#: hundreds); above it a reader's checks cost less than reading every row.
RUN_CHECK_BYTES = 64 << 10
#: Samples per shard from which a batch is read in one pass per shard (read_many) rather than
#: sample by sample: below it the grouping costs more than a format's one-pass read saves.
MIN_GROUP = 16


#: Datasets whose shards a fork first places in their row arena (place_before_fork), held weakly.
_PLACED_AT_FORK: "weakref.WeakSet[ShardRecords]" = weakref.WeakSet()


def _place_before_fork() -> None:
    """Before this process forks: every live dataset places what it can in its row arena, so the
    child (a DataLoader worker, persistent or not) inherits it (ShardRecords.place_before_fork)."""
    for records in list(_PLACED_AT_FORK):
        try:
            records.place_before_fork()
        except Exception:       # a fork must go on whatever a dataset meets: its reads name it later
            pass


# Registered after openfiles' hook, so called before it (before-fork hooks run in reverse order of
# registration): the placements take the locks that hook then holds over the fork.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_place_before_fork)


class ShardRecords:
    """Random access to the stored record (Encoded) of every sample of a shardkit dataset.

    Readers are opened lazily per process and kept in a bounded LRU of this object's own
    (`max_open_shards`, default from the process's descriptor and map limits); they never cross
    a pickle, and a fork only when they are map-only (`open_shards`). `close()` (or a `with` block)
    releases them; reading again reopens lazily.
    """

    #: The format a subclass insists on (None: any).
    format_name: Optional[str] = None
    #: Keywords taken besides the format's reader options (suggested when one is misspelt).
    keywords: Sequence[str] = ("verify_checksums", "max_open_shards")

    def __init__(self, root: "str | os.PathLike[str]", verify_checksums: "bool | str" = False,
                 max_open_shards: Optional[int] = None, _manifest: Optional[Manifest] = None,
                 **format_options: Any) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.manifest: Manifest = _manifest if _manifest is not None else load_manifest(self.root)
        if self.format_name is not None and self.manifest.format_name != self.format_name:
            raise UsageError(f"holds {self.manifest.format_name} shards, not {self.format_name}; "
                             "use shardkit.open_dataset to pick the right reader", path=self.root)
        self._format = fmt = get_format(self.manifest.format_name)
        check_version(fmt, self.manifest.format_version, self.root)
        fmt.reader_options.from_dict(format_options, f"open_dataset ({fmt.name})", also=self.keywords)
        #: The reader options: the manifest's, with the caller's on top (typed, hashable).
        self._options = dataclasses.replace(recorded_options(fmt, self.manifest, self.root), **format_options)
        if max_open_shards is None:
            max_open_shards = process_budget()
        if max_open_shards < 1:
            raise UsageError("max_open_shards must be at least 1")
        if verify_checksums not in (False, True, "full"):
            raise UsageError(f"verify_checksums must be False, True or 'full', not {verify_checksums!r}")
        self.verify_checksums = verify_checksums
        self.max_open_shards = max_open_shards
        self._options_key = (fmt.name, self._options, repr(self.manifest.schema.to_dict()))
        self._checks = SampleChecks(self.manifest, self.root, bool(verify_checksums))
        shards = self.manifest.shards
        self._names: List[str] = shards.paths                  # checked relative paths, one column
        self._paths = shards.joined(self.root)                 # joined when a shard is opened
        self._sizes = shards.sizes
        #: shard_starts[k] is the global index of shard k's first sample; the last entry is len(self).
        self.shard_starts = np.zeros(len(shards) + 1, dtype=np.int64)
        np.cumsum(shards.num_samples, out=self.shard_starts[1:])
        self._starts: List[int] = self.shard_starts.tolist()   # one per shard; bisect on a list is fast
        self._length = int(self.shard_starts[-1])
        #: Samples in every shard but the last (which holds no more), or 0 when they differ: then a
        #: global index finds its shard by a division, touching no per-shard table.
        self._per_shard = _uniform_count(shards.num_samples)
        #: The dataset's sample table, mapped in this process by the first shard opened here (None
        #: before, and always when the manifest lists none): reads then take labels and CRC32s from it.
        self._table: Optional[SampleTable] = None
        self._hashed: set = set()    # (pid, shard) whose sha256 matched (verify_checksums="full")
        #: Whether reads of ready shards index their rows() directly (_row): fixed-shape rows with
        #: labels and CRC32s in the sample table need nothing else of the reader.
        self._by_rows = self.manifest.sample_table is not None and self.manifest.schema.is_array
        #: The most rows a shard holds, when reads index rows (the layout of the shards' row arena).
        self._max_rows = int(np.max(shards.num_samples)) if self._by_rows and len(shards) else 0
        #: Whether a shard not ready here is placed straight from its file (_place_run) before a
        #: reader is opened for it: small shards, each row's bytes checked when placed.
        self._runs_first = bool(self._max_rows) and verify_checksums != "full" and \
            type(fmt).row_run is not ShardFormat.row_run and \
            self._max_rows * self.manifest.schema.sample_nbytes <= RUN_CHECK_BYTES
        #: Each shard's CRC32 of its rows back to back, from the sample table (computed on first use).
        self._run_crcs: Optional[np.ndarray] = None
        #: DST/shards held open for _place_run's opens (made on first use, in each process).
        self._folder: Optional[ShardFolder] = None
        self._handles = ShardHandles(max_open_shards, len(shards), self._max_rows)
        #: Whether a fork places this dataset's shards first (place_before_fork): fixed-shape rows,
        #: and reads that do not hash each shard in each process.
        self._placed_at_fork = bool(self._max_rows) and verify_checksums != "full"
        if self._placed_at_fork:
            _PLACED_AT_FORK.add(self)

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

    def reader(self, shard: int) -> ShardReader:
        """The open reader of a shard (opened in this process on first use)."""
        handles = self._handles
        reader = handles.slots[shard]
        if reader is not None and handles.generation == OPEN_FILES.generation:
            if len(handles.ready) >= handles.capacity:     # order matters only once something must go
                try:
                    handles.ready.move_to_end(shard)
                except KeyError:        # another thread released it a moment ago (ShardHandles.lock)
                    pass
            return reader
        if self.verify_checksums == "full":
            self._check_sha256_once(shard)
        path, name = self._paths[shard], f"shard {shard}"
        with handles.lock:   # no other thread releases it between its open and its checks
            reader = handles.get(shard, self._options_key,
                                 lambda: open_shard_file(path, self.root, int(self._sizes[shard]), name),
                                 lambda fd: reader_of(self._format, self.manifest, shard, self._options, path, fd,
                                                      name))
            try:    # another dataset of the process may have opened the file (shared) after it was replaced
                check_reader(reader, self.manifest, shard, path)
                if self.manifest.sample_table is not None:
                    self._sample_table().check_shard(reader.tables(), self._starts[shard], path, shard)
            except CorruptShardError:
                handles.discard(shard)
                raise
            if self._by_rows:
                handles.publish_rows(shard, reader)
        return reader

    def open_shards(self) -> int:
        """Open and check the first max_open_shards shards (every shard when they fit) in this
        process now, as their first reads would (a small shard placed from its file, without a
        reader); returns how many are ready. DataLoader workers
        forked afterwards start with the map-only ones (uncompressed HDF5 and .pt shards) ready,
        and read the rows of those in the row arena (one-block LMDB shards too) without a reader,
        instead of opening each shard again every epoch when their workers are not persistent."""
        count, placed = min(len(self._paths), self.max_open_shards, process_budget()), 0
        for shard in range(count):
            if self._runs_first and self._place_run(shard):
                placed += 1
            else:
                self.reader(shard)
        return len(self._handles) + placed

    def place_before_fork(self) -> int:
        """Place every shard whose rows can go to the row arena there now, once per arena (a fork
        calls it first): DataLoader workers forked afterwards, a new pair each epoch when not
        persistent, then read those rows without opening the shards again. Small shards are placed
        from their file with no reader (_place_run); others open a reader as a first read would,
        released once its rows are published (no descriptor held), and the first not placed ends it
        (its format places none). A shard that fails is left to its first read, which names it.
        Nothing is done while another thread holds the dataset's LRU (a fork must not wait on it:
        the next fork tries again). Returns how many shards are placed."""
        handles = self._handles
        if handles.swept or not self._placed_at_fork or not handles.lock.acquire(blocking=False):
            return 0
        try:
            handles.swept = True
            return self._place_every_shard()
        finally:
            handles.lock.release()

    def _place_every_shard(self) -> int:
        """place_before_fork's sweep, under the LRU's lock."""
        handles, placed = self._handles, 0
        for shard in range(len(self._paths)):
            if not handles.may_place():
                break
            try:
                if self._runs_first:
                    placed += self._place_run(shard)
                    continue
                if handles.slots[shard] is not None:
                    continue
                self.reader(shard)
            except (ShardkitError, OSError, ValueError):
                continue
            arena = handles.arena
            if arena is None or arena.bases[shard] < 0:
                handles.discard(shard)
                break
            handles.release_placed(shard)
            placed += 1
        return placed

    def _sample_table(self) -> SampleTable:
        """The dataset's sample table, mapped once per process."""
        table = self._table
        if table is None:
            assert self.manifest.sample_table is not None
            table = self._table = SampleTable(self.root, self.manifest.sample_table)
        return table

    def _check_sha256_once(self, shard: int) -> None:
        """verify_checksums="full": hash each shard once per process, even when another dataset of
        the process already holds it open."""
        key = (os.getpid(), shard)
        if key in self._hashed:
            return
        path = self._paths[shard]
        try:
            digest = hash_shard_file(path, self.root, int(self._sizes[shard]))
        except (OSError, ValueError) as exc:
            raise CorruptShardError(f"is missing, unreadable or not a regular file "
                                    f"inside the dataset ({exc})", path=path, shard=shard) from None
        if digest != self.manifest.shards.sha256s[shard]:
            raise CorruptShardError("fails its sha256 check (its bytes changed after "
                                    "conversion)", path=path, shard=shard)
        self._hashed.add(key)

    def key(self, index: Any) -> Optional[str]:
        """The source key of a sample: its path relative to SRC (image trees), "file:row" (table
        rows); None for a dataset written before keys were stored (format version 1)."""
        shard, local = self.locate(index)
        with self._handles.lock:
            return self.reader(shard).key(local)

    def read_encoded(self, index: Any) -> Encoded:
        """The stored record of a global index (CRC and label range checked when verify_checksums)."""
        return self._read(sample_index(index, self._length))

    def _read(self, index: int) -> Encoded:
        """read_encoded for an index already checked by sample_index (the per-sample path)."""
        shard, local = self._locate(index)
        if self._by_rows:
            encoded = self._row(shard, local, index)
            if encoded is None and self._runs_first and self._place_run(shard):
                encoded = self._row(shard, local, index)
            if encoded is not None:
                return encoded
        with self._handles.lock:     # no other thread closes the reader during its read
            reader = self.reader(shard)      # first: opening a shard maps the sample table
            return self._checks.read(reader, shard, local, index, self._table)

    def _place_run(self, shard: int) -> bool:
        """Place a small shard's rows in the row arena straight from its file, with no reader: open
        it checked (open_shard_file), ask its format where rows and labels lie (row_run: a pread,
        no format library), map the rows, and publish them only when the dataset identity and the
        sample count match the manifest, the labels equal the sample table's and the rows, back to
        back, have the CRC32 the table's row CRC32s give. False when the shard is not placed so
        (the reader path then opens and checks it, and names what is wrong, as it does the
        damaged rows when reads are checked); CorruptSampleError when its rows fail their CRC32s
        and reads are not checked (verify_checksums=False): no reader would check them."""
        handles, size = self._handles, int(self._sizes[shard])
        start, count = self._starts[shard], self._starts[shard + 1] - self._starts[shard]
        with handles.lock:
            if handles.arena is not None and handles.arena.bases[shard] >= 0 and handles.slots[shard] is None:
                return True             # placed so already
            if not handles.may_place_run(shard):
                return False
            path = self._paths[shard]
            try:
                fd = self._open_run_file(shard, path, size)
            except (ShardkitError, OSError, ValueError):
                return False
            try:
                table, expected = self._sample_table(), self._expected_run_crcs()
                run = self._format.row_run(fd, size, path, self.manifest.schema, self._options)
                if run is None or run.rows.row_count != count or not count or \
                        (self.manifest.dataset_id is not None and run.dataset_id != self.manifest.dataset_id) or \
                        os.pread(fd, 8 * count, run.labels_offset) != table.labels[start:start + count].tobytes():
                    return False
                rows = handles.place_run(shard, fd, run.rows)
            except (ShardkitError, OSError, ValueError, OverflowError):
                return False
            finally:
                os.close(fd)
            if rows is None:
                return False
            if zlib.crc32(rows) != expected[shard]:
                handles.withdraw(shard)
                if self.verify_checksums:
                    return False        # the reader path checks every read: only the damaged rows fail
                self.reader(shard)      # names it when the shard's own tables differ from the sample table's
                handles.discard(shard)  # they do not: its rows are damaged, and no read may take them
                self._refuse_rows(shard, rows, table.crcs[start:start + count])
            handles.publish_placed(shard)
        return True

    def _open_run_file(self, shard: int, path: str, size: int) -> int:
        """A checked descriptor of a shard's file for _place_run: through the dataset's shards/
        folder, held open, when the shard is a plain name in it (as convert names them), else by
        its path (open_shard_file)."""
        folder_name, _, name = self._names[shard].rpartition("/")
        if folder_name != SHARDS_DIR:
            return open_shard_file(path, self.root, size, f"shard {shard}")
        folder = self._folder
        if folder is None:
            folder = self._folder = ShardFolder(os.path.join(self.root, SHARDS_DIR), self.root)
        return folder.open(name, size)

    def _expected_run_crcs(self) -> np.ndarray:
        """The CRC32 of each shard's rows back to back, combined from the sample table's row CRC32s."""
        crcs = self._run_crcs
        if crcs is None:
            crcs = self._run_crcs = self._sample_table().run_crcs(self.shard_starts, self.manifest.schema.sample_nbytes)
        return crcs

    def _refuse_rows(self, shard: int, rows: np.ndarray, crcs: np.ndarray) -> None:
        """CorruptSampleError naming the first row of a placed shard whose CRC32 is not the sample
        table's (found when the shard's rows were checked whole)."""
        bad = np.flatnonzero(row_crc32(rows.reshape(len(rows), -1).view(np.uint8)) != crcs)
        local = int(bad[0]) if len(bad) else 0
        path, name = self._checks.where(shard)
        raise CorruptSampleError(path, local, "fails its CRC32 check (its shard's rows were checked when it "
                                 "opened; run shardkit verify)", shard=name, global_index=self._starts[shard] + local)

    def _row(self, shard: int, local: int, index: int) -> Optional[Encoded]:
        """The read of a fixed-shape row of a ready shard that published its rows: the same payload
        as reader.payload(local), label and CRC32 from the sample table, without touching the reader
        and its other arrays, and from the row arena's one array once the shard is placed there. At
        10,000 shards each per-shard object is a cache miss (benchmarks/read_parts.py).
        None when the shard is not ready here: the reader path opens it, checks it and publishes it."""
        handles = self._handles
        if handles.generation != OPEN_FILES.generation:
            return None
        arena = handles.arena       # one array for every placed shard's rows (read/row_arena.py)
        rows: Any
        if arena is not None and (base := arena.bases[shard]) >= 0:
            rows, position = arena.rows, base + local
        else:
            rows, position = handles.rows[shard], local
            if rows is None:
                return None
        if len(handles.ready) >= handles.capacity:     # order matters only once something must go
            try:
                handles.ready.move_to_end(shard)
            except KeyError:    # placed without a reader (_place_run), or released a moment ago: open it again
                if arena is None or arena.bases[shard] < 0:
                    return None
        payload = rows[position]
        if payload is None:             # a row source whose map has closed since: open it again
            return None
        table = self._table
        assert table is not None        # rows are published once the shard matched the table
        encoded = Encoded(payload, table.labels.item(index), table.crcs.item(index))
        return self._checks.check(encoded, shard, local, index) if self.verify_checksums else encoded

    def read_encoded_many(self, indices: Sequence[Any]) -> List[Encoded]:
        """The stored records of global indices, in their order: one backend pass per shard."""
        return self._read_many(sample_indices(indices, self._length))

    def _read_many(self, wanted: np.ndarray) -> List[Encoded]:
        """read_encoded_many for indices already checked by sample_indices. A batch of small
        groups per shard (uniform order: a batch of 256 over 100 shards meets each about 2.5 times)
        is read sample by sample, which costs less than grouping it (benchmarks/batch_grouping.py)."""
        shards = np.searchsorted(self.shard_starts, wanted, side="right") - 1
        if len(wanted) < MIN_GROUP * len(np.unique(shards)):
            return [self._read(index) for index in wanted.tolist()]
        groups: Dict[int, List[int]] = {}
        for position, shard in enumerate(shards.tolist()):
            groups.setdefault(shard, []).append(position)
        globals_ = wanted.tolist()
        out: List[Any] = [None] * len(globals_)
        for shard, positions in groups.items():
            if len(positions) == 1:
                out[positions[0]] = self._read(globals_[positions[0]])
                continue
            start, picked = self._starts[shard], [globals_[position] for position in positions]
            with self._handles.lock:
                encoded = self._checks.read_many(self.reader(shard), shard, [index - start for index in picked],
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
            return read_labels(self.root, self.manifest.sample_table)
        with self._handles.lock:     # no other thread closes a reader before its labels are copied
            return np.concatenate([self.reader(shard).labels() for shard in range(len(self._paths))])

    def close(self) -> None:
        """Release this object's shard handles (a file other datasets still use stays open)."""
        self._handles.close()

    def __enter__(self: _Records) -> _Records:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        # handles never cross processes
        state["_handles"] = ShardHandles(self.max_open_shards, len(self._paths), self._max_rows)
        state["_table"] = state["_run_crcs"] = state["_folder"] = None     # nor maps, descriptors or what they give
        return state


def _uniform_count(counts: np.ndarray) -> int:
    """The sample count of every shard but the last when they share it (the last holding at most
    as many), else 0."""
    counts = np.asarray(counts, dtype=np.int64)
    if not len(counts) or counts[0] <= 0 or (counts[:-1] != counts[0]).any() or counts[-1] > counts[0]:
        return 0
    return int(counts[0])
