"""The contract every storage format implements: a format object, a writer and a reader.

A format lays out bytes only. It never renames, hashes, touches the manifest or decodes
images; the sink and the read side do that once for all formats.
"""
from __future__ import annotations

import abc
import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Type

import numpy as np

from ..errors import UsageError
from ..options import refuse_unknown
from ..records import Encoded, Payload
from ..schema import SampleSchema
from .locating import Location


#: Datasets up to this fraction of physical memory default to OS readahead on (docs/formats.md).
READAHEAD_RAM_FRACTION = 0.5


def physical_memory() -> int:
    """Bytes of RAM of this machine (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def readahead_by_size(total_bytes: int) -> Dict[str, Any]:
    """Readahead on while a dataset fits comfortably in RAM (cold epochs stream), off beyond it
    (nearly every random read misses the cache; readahead would read megabytes per sample)."""
    ram = physical_memory()
    return {"readahead": bool(ram == 0 or total_bytes <= READAHEAD_RAM_FRACTION * ram)}


class ShardWriter(abc.ABC):
    """Writes one shard file at the path it was given; close() completes it (the sink fsyncs it)."""

    @abc.abstractmethod
    def append(self, sample: Encoded) -> None:
        """Add the next sample (local index = number of samples appended before it)."""

    def append_many(self, samples: Sequence[Encoded]) -> None:
        """Add consecutive samples; the same as append() on each (a format may do it faster,
        but must store exactly the same bytes)."""
        for sample in samples:
            self.append(sample)

    @abc.abstractmethod
    def close(self) -> None:
        """Finish the file: write indexes and metadata, flush (the sink fsyncs it before it counts)."""

    def abort(self) -> None:
        """Release resources after a failure; the caller deletes the file."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - aborting must not mask the original error
            pass


class ShardReader(abc.ABC):
    """Random access to one shard's samples; raises CorruptShardError on a bad structure."""

    #: Identity of the dataset the shard was written for (None: a format version without one).
    dataset_id: Optional[str] = None
    #: Whether reads of the shard's map may read ahead of the pages they touch (False: the
    #: `readahead` option turned off, MADV_RANDOM), for every map of its rows.
    readahead: bool = True

    @property
    def inheritable(self) -> bool:
        """Whether a forked child may go on reading through this open reader: true only of a reader
        that holds a read-only map and nothing else (no format library's state, no file position),
        which a fork copies intact. A dataset's cache keeps such readers in a child (read/cache.py)."""
        return False

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of samples in the shard."""

    @abc.abstractmethod
    def read(self, index: int) -> Encoded:
        """Sample at local index: payload as stored, label, stored CRC32."""

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Samples at local indices, in that order, in one pass (a format may do it faster than
        read() on each, with the same checks and the same results)."""
        return [self.read(index) for index in indices]

    @abc.abstractmethod
    def labels(self) -> np.ndarray:
        """All labels of the shard as an int64 array (NO_LABEL when unlabeled)."""

    def tables(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        """(labels, CRC32s) of every sample when the shard stores both as tables (what the dataset's
        sample table is written from and compared with); None when its CRC32s live in its records."""
        return None

    def payload(self, index: int) -> Payload:
        """The payload alone of local index: what a read takes from the shard when the label and
        CRC32 come from the dataset's sample table (a format with tables reads nothing else)."""
        return self.read(index).payload

    def key(self, index: int) -> Optional[str]:
        """The source key of the sample at local index (None: a format version without keys);
        read lazily, so opening a shard reads none of its keys."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range for shard of {len(self)}")
        return None

    def __iter__(self) -> Iterator[Encoded]:
        for index in range(len(self)):
            yield self.read(index)

    def close(self) -> None:
        """Release file handles."""


class TableShardReader(ShardReader):
    """A shard whose labels and CRC32s are tables of `_count` entries and whose fixed-shape rows,
    when stored plainly back to back, are one `(count, *shape)` view `_rows`: a read of such a row
    indexes three arrays, and every other payload comes from the format's `_payload`."""

    _count: int
    _labels: np.ndarray
    _crcs: np.ndarray
    _rows: Optional[np.ndarray]

    def __len__(self) -> int:
        return self._count

    def read(self, index: int) -> Encoded:
        return Encoded(self.payload(index), self._labels.item(index), self._crcs.item(index))

    def payload(self, index: int) -> Payload:
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for shard of {self._count}")
        rows = self._rows
        return rows[index] if rows is not None else self._payload(index)

    @abc.abstractmethod
    def _payload(self, index: int) -> Payload:
        """The payload of local index (in range) when it is not a row of `_rows`."""

    def labels(self) -> np.ndarray:
        return self._labels

    def tables(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        return self._labels, self._crcs


@dataclass(frozen=True)
class FormatOptions:
    """Base of a format's typed reader and writer options (this class itself takes none):
    from_dict refuses unknown keys and wrong types, to_dict gives them back as plain JSON."""

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        return tuple(item.name for item in fields(cls))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str, also: Sequence[str] = ()) -> "FormatOptions":
        """The options in data; UnknownOptionError for a key this class does not take (also:
        other names accepted in the same call, offered as suggestions)."""
        refuse_unknown(data, cls.names(), where, also=also)
        for item in fields(cls):
            if item.name in data and not isinstance(data[item.name], item.type if isinstance(item.type, type)
                                                    else _TYPES[str(item.type)]):
                raise UsageError(f"{where}: {item.name} must be {item.type}, not {data[item.name]!r}")
        return cls(**data)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


_TYPES = {"bool": bool, "int": int, "str": str}


@dataclass(frozen=True)
class ReadaheadOptions(FormatOptions):
    """Reader options of memory-mapped formats (HDF5, LMDB)."""

    readahead: bool = True


class ShardFormat(abc.ABC):
    """A storage format: its name, on-disk version, file extension and factories."""

    name: str = ""
    version: int = 1
    extension: str = ""
    #: The options its reader takes (recorded in the manifest's format_options, or given to
    #: open_dataset): a FormatOptions class; the base class takes none.
    reader_options: Type[FormatOptions] = FormatOptions
    #: The options its writer takes, apart from the reader's: they shape how a shard is written
    #: and are not recorded (what a reader needs is in the schema and the file). No format's
    #: writer takes one today, so each has the base class.
    writer_options: Type[FormatOptions] = FormatOptions
    #: The first version whose shards store sample keys and the dataset identity.
    keys_since: int = 1
    #: Whether a crafted shard can crash this format's C library (SIGBUS, SIGSEGV): verify then
    #: checks each shard in a child process (isolation.py) and reports a killed child.
    crafted_files_crash: bool = False

    def check(self, schema: SampleSchema) -> None:
        """Raise UsageError if this format cannot store samples of this schema."""

    def default_options(self, schema: SampleSchema, total_bytes: int) -> Dict[str, Any]:
        """Reader/writer options recorded in the manifest (e.g. LMDB readahead)."""
        return {}

    #: Bytes a shard file takes beyond its samples (headers, metadata), an upper estimate.
    fixed_bytes: int = 64 << 10

    def sample_bytes(self, schema: SampleSchema, payload_bytes: np.ndarray) -> np.ndarray:
        """Upper estimate of the bytes each sample adds to a shard, from its estimated stored bytes
        (payload and key, from the source): plus what the format stores with it (tables, headers,
        page padding). The plan cuts shards with it, so --shard-size holds for every format."""
        return np.asarray(payload_bytes, dtype=np.int64)

    @abc.abstractmethod
    def open_writer(self, path: str, schema: SampleSchema, options: FormatOptions,
                    dataset_id: str = "") -> ShardWriter:
        """A writer for a new shard file at path, stamped with the identity of its dataset."""

    @abc.abstractmethod
    def open_reader(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> ShardReader:
        """A reader for an existing shard file at path. options: an instance of reader_options (None:
        its defaults). fd: a read-only descriptor of that file the caller opened and checked
        (checked.open_shard_file); the reader reads through it while it opens and never closes it
        (a map it keeps holds its own). None: the reader opens path itself."""

    def peek(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
             fd: Optional[int] = None) -> Tuple[int, Optional[str]]:
        """(number of samples, dataset_id) of the shard at path, as cheaply as the format can tell:
        what verify checks of every shard short of --deep. This default opens a reader (with all its
        structural checks); a format that records both in a small record at a fixed place reads just
        that, and raises CorruptShardError when the record is damaged. fd: as for open_reader."""
        reader = self.open_reader(path, schema, options, fd)
        try:
            return len(reader), reader.dataset_id
        finally:
            reader.close()

    def locate(self, fd: int, size: int, path: str, schema: SampleSchema,
               options: Optional[FormatOptions] = None) -> Optional[Location]:
        """Where the shard open as fd (`size` bytes, checked by open_shard_file) keeps its
        uncompressed fixed-shape rows back to back, its labels and its CRC32s, read from the format's
        own record with a few preads and no format library, after every check of that record (a
        locator's CRC32, ranges, and that it still describes the file): the one way the read side
        asks where rows lie (checked.CheckedShards.locate). None where the format keeps no such
        record or the shard is not so laid out; CorruptShardError when the record is damaged."""
        return None

    def cross_check(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> Optional[str]:
        """verify --deep: what the format's own library finds wrong with a shard that its reader,
        taking a shortcut, does not look at (None: nothing); CorruptShardError when it cannot open.
        fd: as for open_reader (the file is read through it, never reopened by path)."""
        return None
