"""FieldsDataset: a torch Dataset over a dataset of named fields (manifest version 2).

It reads each field it is asked for as the dataset of one payload that field's column is: one
ShardRecords per column, each with its own ShardCache, sharing the index arithmetic (every column
has the same shards). So every check of the read path applies per field, and a field not asked
for is never opened: its files are not touched. The dataset's `max_open_shards` bounds the files
of all its columns together: each column's cache gets an equal share of it (at least one)."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch.utils.data

from ..codecs.decode import DECODE_MODES
from ..codecs.field_decode import field_decoder
from ..codecs.fields import column_schemas
from ..errors import CorruptSampleError, SampleError, UsageError
from ..field_views import column_views
from ..manifest import Manifest, load_manifest
from ..records import NO_LABEL, Encoded
from ..remote.cache import RemoteShardCache
from ..schema import FieldSpec
from .cache import CacheInfo, ShardCache
from .dataset import ClassNames
from .indices import sample_index, sample_indices
from .shards import ShardRecords, default_budget

#: A sample's stored records, one per column read.
Record = Dict[str, Encoded]


class FieldCaches:
    """The caches of every column a FieldsDataset reads, driven as one (what ShardStream and a
    DataLoader's workers ask of a dataset's `shard_cache`)."""

    def __init__(self, caches: Dict[str, ShardCache]) -> None:
        self.caches = caches

    def check_files(self) -> None:
        for cache in self.caches.values():
            cache.check_files()

    def prepare(self) -> int:
        return min(cache.prepare() for cache in self.caches.values())

    @property
    def capacity(self) -> int:
        """Files kept open at most, every column's together."""
        return sum(cache.capacity for cache in self.caches.values())

    def info(self) -> Dict[str, CacheInfo]:
        """Each column's CacheInfo: what it holds open in this process."""
        return {column: cache.info() for column, cache in self.caches.items()}


class FieldsDataset(ClassNames, torch.utils.data.Dataset):
    """ds[i] -> a dict of the sample's fields (an absent optional field is None), or with
    `fields=("image", "caption")` a tuple in that order; only the fields asked for are read."""

    def __init__(self, root: "str | os.PathLike[str]", fields: Optional[Sequence[str]] = None,
                 decode: Any = "pil", transform: Optional[Callable[[Any], Any]] = None,
                 verify_checksums: "bool | str" = False, max_open_shards: Optional[int] = None,
                 return_key: bool = False, _manifest: Optional[Manifest] = None,
                 _remote: Optional[RemoteShardCache] = None, **format_options: Any) -> None:
        #: The local cache of a dataset at a URL (open_dataset makes it), else None.
        self.remote_cache = _remote
        self.root = _remote.location.shown if _remote is not None else os.path.abspath(os.fspath(root))
        self.manifest = _manifest if _manifest is not None else load_manifest(self.root)
        self.specs = _selected(self.manifest, fields, self.root)
        self.as_tuple = fields is not None
        self.decode, self.transform, self.return_key = decode, transform, return_key
        columns = [column for spec in self.specs for column in spec.columns]
        if max_open_shards is None:
            max_open_shards = default_budget(verify_checksums == "full", self.manifest.shards.sizes)
        if max_open_shards < 1:
            raise UsageError("max_open_shards must be at least 1")
        units = self.manifest.shards.sizes          # a shard's files, every column's, together
        if _remote is not None and len(units) and _remote.limit < int(units.sum()):
            # open files stay in the cache: no more whole shards at once than the limit holds
            max_open_shards = min(max_open_shards, max(1, _remote.limit // int(units.max())) * len(columns))
        #: Files kept open per process, every column's together (each column's cache a share of it).
        self.max_open_shards = max_open_shards
        share = max(1, max_open_shards // len(columns))
        self.records = {column: ShardRecords(self.root, verify_checksums=verify_checksums, max_open_shards=share,
                                             _manifest=view, _remote=None if _remote is None else
                                             _remote.for_manifest(view), **format_options)
                        for column, view in column_views(self.manifest, columns).items()}
        self.shard_cache = FieldCaches({column: records.shard_cache for column, records in self.records.items()})
        first = next(iter(self.records.values()))
        #: shard_starts[k]: the global index of shard k's first sample; the last entry is len(self)
        self.shard_starts = first.shard_starts
        self._length = len(first)
        self._modes = _modes(decode, self.specs, self.root)
        self._decoders = self._make_decoders()

    def _make_decoders(self) -> Dict[str, Any]:
        schemas = column_schemas(self.manifest.schema)
        return {spec.name: field_decoder(spec, schemas[spec.name], self._modes[spec.name]) for spec in self.specs}

    # ---- metadata ----------------------------------------------------------------------
    @property
    def fields(self) -> Tuple[str, ...]:
        """The names of the fields read, in the order a sample gives them."""
        return tuple(spec.name for spec in self.specs)

    @property
    def schema(self) -> Any:
        return self.manifest.schema

    @property
    def field_caches(self) -> Dict[str, ShardCache]:
        """Each column's ShardCache: `ds.field_caches["image"].info()` says what it holds open."""
        return self.shard_cache.caches

    def __len__(self) -> int:
        return self._length

    def locate(self, index: Any) -> Tuple[int, int]:
        """(shard number, index within shard) of a global index."""
        return next(iter(self.records.values())).locate(index)

    def key(self, index: Any) -> Optional[str]:
        """The sample's key (every column stores it; read from the first column read)."""
        return next(iter(self.records.values())).key(index)

    # ---- samples -------------------------------------------------------------------------
    def read_encoded(self, index: Any) -> Record:
        """The stored records of a sample, one per column read."""
        position = sample_index(index, self._length)
        return {column: records._read(position) for column, records in self.records.items()}

    def __getitem__(self, index: Any) -> Any:
        position = sample_index(index, self._length)
        return self.finish({column: records._read(position) for column, records in self.records.items()}, position)

    def __getitems__(self, indices: Sequence[Any]) -> List[Any]:
        """A batch in the order asked, each column read in one pass per shard."""
        wanted = sample_indices(indices, self._length)
        return [self.finish(record, index) for record, index in zip(self._read_many(wanted), wanted.tolist())]

    def read_encoded_many(self, indices: Sequence[Any]) -> List[Record]:
        """The stored records of global indices, in their order (one per column read, each column
        read in one pass per shard)."""
        return self._read_many(sample_indices(indices, self._length))

    def _read_many(self, wanted: Any) -> List[Record]:
        columns = {column: records._read_many(wanted) for column, records in self.records.items()}
        return [{column: batch[row] for column, batch in columns.items()} for row in range(len(wanted))]

    def finish(self, record: Record, index: Optional[int] = None) -> Any:
        """A sample's stored records as __getitem__ returns the sample: decoded, with the key when
        asked, transformed."""
        values: Dict[str, Any] = {}
        for spec in self.specs:
            stored = record[spec.name]
            if stored.label == NO_LABEL:
                values[spec.name] = None
                continue
            shape = record[spec.columns[1]].payload if spec.variable else None
            try:
                values[spec.name] = self._decoders[spec.name](stored.payload, shape)
            except SampleError as exc:
                raise self._undecodable(spec.name, index, exc) from None
        sample: Any = tuple(values.values()) if self.as_tuple else values
        if self.return_key:
            key = self.key(index)
            sample = (*sample, key) if self.as_tuple else {**values, "__key__": key}
        return self.transform(sample) if self.transform is not None else sample

    def _undecodable(self, column: str, index: Optional[int], exc: SampleError) -> CorruptSampleError:
        """The error for a stored value that does not decode, naming its file and sample."""
        shard, local = self.locate(index if index is not None else 0)
        path, name = self.records[column]._checks.where(shard)
        return CorruptSampleError(path, local, f"field {column!r}: {exc}", shard=name, global_index=index)

    # ---- shards, pickling ---------------------------------------------------------------------
    def open_shards(self) -> int:
        """Open the first max_open_shards shards of every column read (ShardRecords.open_shards)."""
        return self.shard_cache.prepare()

    def prefetch(self, shards: Iterable[int]) -> None:
        """Fetch these shards' files of every column read into the local cache in the background
        (a dataset at a URL; nothing for a local one). ShardStream and ShardAwareSampler call it."""
        wanted = list(shards)
        for records in self.records.values():
            records.prefetch(wanted)

    def close(self) -> None:
        """Close the shards this process holds open (and stop prefetching)."""
        for records in self.records.values():
            records.close()
        if self.remote_cache is not None:
            self.remote_cache.close()

    def __enter__(self) -> "FieldsDataset":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_decoders", None)      # rebuilt on unpickling
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.shard_cache = FieldCaches({column: records.shard_cache for column, records in self.records.items()})
        self._decoders = self._make_decoders()

    def __repr__(self) -> str:
        return (f"FieldsDataset({self.root!r}, format={self.manifest.format_name}, samples={self._length}, "
                f"fields={self.fields}, decode={self.decode!r})")


def _selected(manifest: Manifest, fields: Optional[Sequence[str]], root: str) -> List[FieldSpec]:
    """The specs of the fields asked for, in that order (all, in schema order, for None)."""
    specs = {spec.name: spec for spec in manifest.schema.fields}
    if fields is None:
        return list(specs.values())
    if isinstance(fields, str) or not isinstance(fields, Sequence) or not fields:
        raise UsageError(f"fields must be a sequence of field names, such as ('image', 'caption'), not {fields!r}")
    for name in fields:
        if name not in specs:
            raise UsageError(f"no field {name!r}; the dataset's fields are {', '.join(specs)}", path=root)
    if len(set(fields)) != len(fields):
        raise UsageError(f"fields names a field twice: {list(fields)!r}")
    return [specs[name] for name in fields]


def _modes(decode: Any, specs: List[FieldSpec], root: str) -> Dict[str, Optional[str]]:
    """Each field's decode mode: one for all, or per field (fields not named: "pil")."""
    given: Mapping[str, Any] = decode if isinstance(decode, Mapping) else {spec.name: decode for spec in specs}
    names = {spec.name for spec in specs}
    for name, mode in given.items():
        if name not in names:
            raise UsageError(f"decode names {name!r}, which is not a field read ({', '.join(sorted(names))})",
                             path=root)
        if mode not in DECODE_MODES:
            raise UsageError(f"unknown decode mode {mode!r} for field {name!r}; choose pil, numpy, tensor or None")
    return {spec.name: given.get(spec.name, "pil") for spec in specs}
