"""The read side: a torch Dataset over a shardkit DST, for any registered format."""
from __future__ import annotations

import bisect
import operator
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch.utils.data

from ..codecs.decode import make_decoder
from ..errors import CorruptSampleError, CorruptShardError, SampleError, UsageError
from ..formats import SampleChecks, ShardReader, check_version, get_format, open_checked
from .handles import ShardHandles, default_max_open_shards
from ..integrity import hash_shard_file
from ..manifest import Manifest, load_manifest
from .openfiles import OPEN_FILES
from ..records import Encoded

#: The keywords of ShardDataset itself (suggested when a format option is misspelt).
DATASET_OPTIONS = ("decode", "transform", "target_transform", "verify_checksums", "max_open_shards", "as_dict",
                   "return_key")


class ShardDataset(torch.utils.data.Dataset):
    """Random access to every sample of a shardkit dataset: ds[i] -> (sample, label) or sample.

    File handles are opened lazily per process and kept in a bounded LRU of this dataset's own
    (`max_open_shards`, default from the process's descriptor and map limits), so the dataset
    pickles without them and works in DataLoader workers under fork and spawn. `close()` (or a
    `with` block) releases them; reading again afterwards reopens lazily.
    """

    format_name: Optional[str] = None

    def __init__(self, root: "str | os.PathLike[str]", decode: Optional[str] = "pil",
                 transform: Optional[Callable[[Any], Any]] = None,
                 target_transform: Optional[Callable[[Any], Any]] = None,
                 verify_checksums: "bool | str" = False, max_open_shards: Optional[int] = None,
                 as_dict: bool = False, return_key: bool = False, _manifest: Optional[Manifest] = None,
                 **format_options: Any) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.manifest: Manifest = _manifest if _manifest is not None else load_manifest(self.root)
        if self.format_name is not None and self.manifest.format_name != self.format_name:
            raise UsageError(f"holds {self.manifest.format_name} shards, not {self.format_name}; "
                             "use shardkit.open_dataset to pick the right reader", path=self.root)
        self._format = get_format(self.manifest.format_name)
        fmt = self._format
        check_version(fmt, self.manifest.format_version, self.root)
        fmt.reader_options.from_dict(format_options, f"open_dataset ({fmt.name})", also=DATASET_OPTIONS)
        if return_key and self.manifest.format_version < fmt.keys_since:
            raise UsageError(f"written with {fmt.name} format version {self.manifest.format_version}, "
                             f"before samples stored their keys; return_key needs version {fmt.keys_since} "
                             "(re-shard it: shardkit convert OLD NEW keys each sample by its index)", path=self.root)
        if max_open_shards is None:
            max_open_shards = default_max_open_shards()
        if max_open_shards < 1:
            raise UsageError("max_open_shards must be at least 1")
        if verify_checksums not in (False, True, "full"):
            raise UsageError(f"verify_checksums must be False, True or 'full', not {verify_checksums!r}")
        self.decode = decode
        self.transform = transform
        self.target_transform = target_transform
        self.verify_checksums = verify_checksums
        self.max_open_shards = max_open_shards
        self._format_options: Dict[str, Any] = {**self.manifest.format_options, **format_options}
        self._options_key = (self._format.name, repr(sorted(self._format_options.items())),
                             repr(self.manifest.schema.to_dict()))
        self.as_dict = as_dict
        self.return_key = return_key
        self._decoder = self._make_decoder()
        self._labeled = self.manifest.schema.labeled
        self._checks = SampleChecks(len(self.manifest.classes) if self._labeled else 0, bool(verify_checksums))
        shards = self.manifest.shards
        self._names: List[str] = shards.paths                  # checked relative paths, one column
        self._paths = shards.joined(self.root)                 # joined when a shard is opened
        self._sizes = shards.sizes
        self._counts = shards.num_samples
        #: shard_starts[k] is the global index of shard k's first sample; the last entry is len(self).
        self.shard_starts = np.zeros(len(shards) + 1, dtype=np.int64)
        np.cumsum(self._counts, out=self.shard_starts[1:])
        self._starts: List[int] = self.shard_starts.tolist()   # one per shard; bisect on a list is fast
        self._length = int(self.shard_starts[-1])
        self._handles = ShardHandles(max_open_shards)
        self._hashed: set = set()    # (pid, shard) whose sha256 matched (verify_checksums="full")

    # ---- metadata ----------------------------------------------------------------
    @property
    def classes(self) -> List[str]:
        """Class names in label order."""
        return list(self.manifest.classes)

    @property
    def class_to_idx(self) -> Dict[str, int]:
        """Class name -> label."""
        return {name: index for index, name in enumerate(self.manifest.classes)}

    @property
    def schema(self) -> Any:
        """The SampleSchema of every sample."""
        return self.manifest.schema

    @property
    def columns(self) -> List[str]:
        """Tabular datasets: the stored column names, in as_dict order (features, then text columns)."""
        return [column["name"] for column in self.manifest.schema.columns]

    @property
    def feature_names(self) -> List[str]:
        """Tabular datasets: the column of each entry of the features tensor."""
        return [column["name"] for column in self.manifest.schema.columns if column["type"] != "text"]

    @property
    def vocabularies(self) -> Dict[str, List[str]]:
        """Tabular datasets: category column -> its values; a stored code indexes this list (-1: missing)."""
        return {column["name"]: list(column.get("vocabulary", []))
                for column in self.manifest.schema.columns if column["type"] == "category"}

    def _make_decoder(self) -> Any:
        if not self.as_dict:
            return make_decoder(self.manifest.schema, self.decode, self.manifest.source)
        if self.manifest.schema.kind != "tabular":
            raise UsageError("as_dict=True applies to tabular (CSV) datasets only", path=self.root)
        from ..codecs.tabular import make_tabular_decoder
        return make_tabular_decoder(self.manifest.schema, self.decode, as_dict=True)

    def __len__(self) -> int:
        return self._length

    # ---- access ------------------------------------------------------------------
    def locate(self, index: Any) -> "tuple[int, int]":
        """(shard number, index within shard) of a global index."""
        return self._locate(sample_index(index, self._length))

    def _locate(self, index: int) -> "tuple[int, int]":
        """locate for an index already checked by sample_index (the per-sample path checks once)."""
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, index - self._starts[shard]

    def reader(self, shard: int) -> ShardReader:
        """The open reader of a shard (opened in this process on first use)."""
        handles = self._handles
        reader = handles.ready.get(shard)
        if reader is not None and handles.generation == OPEN_FILES.generation:
            if len(handles.ready) >= handles.capacity:     # order matters only once something must go
                handles.ready.move_to_end(shard)
            return reader
        if self.verify_checksums == "full":
            self._check_sha256_once(shard)
        reader = handles.get(shard, self._paths[shard], self._options_key, lambda: self._open(shard))
        try:    # another dataset of the process may have opened the file (shared) after it was replaced
            self.manifest.check_identity(reader.dataset_id, self._paths[shard], shard)
        except CorruptShardError:
            handles.discard(shard)
            raise
        return reader

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

    def _open(self, shard: int) -> ShardReader:
        return open_checked(self._format, self.manifest, self.root, shard, self._format_options,
                            path=self._paths[shard])

    def key(self, index: Any) -> Optional[str]:
        """The source key of a sample: its path relative to SRC (image trees), "file:row" (table
        rows); None for a dataset written before keys were stored (format version 1)."""
        shard, local = self.locate(index)
        return self.reader(shard).key(local)

    def read_encoded(self, index: Any) -> Encoded:
        """The stored record of a global index (CRC and label range checked when verify_checksums)."""
        return self._read(sample_index(index, self._length))

    def _read(self, index: int) -> Encoded:
        """read_encoded for an index already checked by sample_index (the per-sample path)."""
        shard, local = self._locate(index)
        return self._checks.read(self.reader(shard), self._paths[shard], self._names[shard], local, index)

    def read_encoded_many(self, indices: Sequence[Any]) -> List[Encoded]:
        """The stored records of global indices, in their order: one backend pass per shard."""
        return self._read_many(sample_indices(indices, self._length))

    def _read_many(self, wanted: np.ndarray) -> List[Encoded]:
        """read_encoded_many for indices already checked by sample_indices."""
        shards = np.searchsorted(self.shard_starts, wanted, side="right") - 1
        groups: Dict[int, List[int]] = {}
        for position, shard in enumerate(shards.tolist()):
            groups.setdefault(shard, []).append(position)
        globals_ = wanted.tolist()
        out: List[Any] = [None] * len(globals_)
        for shard, positions in groups.items():
            reader, path, name, start = self.reader(shard), self._paths[shard], self._names[shard], self._starts[shard]
            if len(positions) == 1:
                index = globals_[positions[0]]
                out[positions[0]] = self._checks.read(reader, path, name, index - start, index)
                continue
            picked = [globals_[position] for position in positions]
            encoded = self._checks.read_many(reader, path, name, [index - start for index in picked], picked)
            for position, one in zip(positions, encoded):
                out[position] = one
        return out

    def __getitem__(self, index: Any) -> Any:
        if type(index) is not int or not 0 <= index < self._length:    # else sample_index would return it
            index = sample_index(index, self._length)
        return self.finish(self._read(index), index)

    def __getitems__(self, indices: Sequence[Any]) -> List[Any]:
        """A batch of samples in the order asked: DataLoader calls this with a whole batch, and
        each shard is read in one pass (decode and transforms still run per sample)."""
        wanted = sample_indices(indices, self._length)
        return [self.finish(encoded, index) for encoded, index in zip(self._read_many(wanted), wanted.tolist())]

    def finish(self, encoded: Encoded, index: Optional[int] = None) -> Any:
        """A stored record as __getitem__ returns it: decoded, transformed, with its label (and its
        key with return_key, which needs the global index)."""
        try:
            sample = self._decoder(encoded.payload)
        except SampleError as exc:      # Pillow's verdict on stored bytes: a corrupt sample here
            raise self._undecodable(index, exc) from None
        if self.as_dict:
            if self.return_key:
                sample["__key__"] = self.key(index)
            return self._as_dict(sample, encoded.label)
        if self.transform is not None:
            sample = self.transform(sample)
        if not self._labeled:
            return (sample, self.key(index)) if self.return_key else sample
        label = encoded.label if self.target_transform is None else self.target_transform(encoded.label)
        return (sample, label, self.key(index)) if self.return_key else (sample, label)

    def _undecodable(self, index: Optional[int], exc: SampleError) -> CorruptShardError:
        """The error for stored bytes that do not decode, naming the shard and sample."""
        if index is None:
            return CorruptShardError(f"a sample does not decode ({exc})", path=self.root)
        shard, local = self.locate(index)
        return CorruptSampleError(self._paths[shard], local, str(exc),
                                  shard=self._names[shard], global_index=index)

    def _as_dict(self, row: Dict[str, Any], label: Any) -> Any:
        """as_dict=True: the label joins the row under its column name, then transform sees it all."""
        if self._labeled:
            row[self.manifest.schema.codec.get("label_column") or "label"] = \
                self.target_transform(label) if self.target_transform is not None else label
        return self.transform(row) if self.transform is not None else row

    def targets(self) -> np.ndarray:
        """All labels in index order (reads each shard's label table, no payloads)."""
        if not self._length:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([self.reader(shard).labels() for shard in range(len(self._paths))])

    def close(self) -> None:
        """Release this dataset's shard handles (a file other datasets still use stays open)."""
        self._handles.close()

    def __enter__(self) -> "ShardDataset":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_decoder", None)     # rebuilt on unpickling
        state["_handles"] = ShardHandles(self.max_open_shards)      # handles never cross processes
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._decoder = self._make_decoder()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.root!r}, format={self.manifest.format_name}, "
                f"samples={self._length}, shards={len(self._paths)}, decode={self.decode!r})")


class HDF5Dataset(ShardDataset):
    """ShardDataset that insists on HDF5 shards."""

    format_name = "hdf5"


class LMDBDataset(ShardDataset):
    """ShardDataset that insists on LMDB shards."""

    format_name = "lmdb"


class PTDataset(ShardDataset):
    """ShardDataset that insists on PyTorch .pt shards."""

    format_name = "pt"


def sample_index(index: Any, length: int) -> int:
    """index as a Python int in [0, length): ints, numpy integers and 0-d integer tensors, negative
    ones counted from the end as Python does; TypeError for any other type (floats, bools, arrays)."""
    kind = str(getattr(index, "dtype", type(index).__name__))
    if getattr(index, "ndim", 0) != 0 or "bool" in kind:
        raise TypeError(f"sample index must be an integer, not {type(index).__name__} {kind}")
    try:
        position = operator.index(index)
    except TypeError:
        raise TypeError(f"sample index must be an integer, not {type(index).__name__}") from None
    if not -length <= position < length:
        raise IndexError(f"index {position} out of range for dataset of {length} samples")
    return position + length if position < 0 else position


def sample_indices(indices: Sequence[Any], length: int) -> np.ndarray:
    """Every index of a batch through sample_index's rules, as an int64 array in [0, length); a
    1-D integer array or tensor is checked at once."""
    if isinstance(indices, torch.Tensor):
        indices = indices.numpy()
    if isinstance(indices, np.ndarray) and indices.ndim == 1 and indices.dtype.kind in "iu":
        wanted = indices.astype(np.int64)
        bad = (wanted < -length) | (wanted >= length)
        if bad.any():
            raise IndexError(f"index {int(wanted[bad][0])} out of range for dataset of {length} samples")
        return np.where(wanted < 0, wanted + length, wanted)
    return np.fromiter((sample_index(index, length) for index in indices), dtype=np.int64)


def open_dataset(root: "str | os.PathLike[str]", **kwargs: Any) -> ShardDataset:
    """Open DST with the Dataset class of the format its manifest names.

    Args:
        root: the dataset folder (DST of a conversion).
        **kwargs: passed to the dataset class: `decode` ("pil", "numpy", "tensor" or None for the
            stored payload), `transform`, `target_transform`, `verify_checksums` (False, True for
            each sample's CRC32, or "full" to also hash each shard once per process),
            `max_open_shards` (this dataset's shards kept open per process; default from the
            process's descriptor and map limits), `as_dict` (tabular rows as dicts), `return_key`
            (each sample also returns its source key), and format options such as `readahead=False`.

    Returns:
        An `HDF5Dataset`, `LMDBDataset` or `PTDataset`, all `torch.utils.data.Dataset`s.

    Raises:
        NotADatasetError: root holds no manifest.
        ManifestError: the manifest is damaged or from a newer shardkit.
    """
    manifest = load_manifest(root)
    classes = {cls.format_name: cls for cls in ShardDataset.__subclasses__()}
    return classes.get(manifest.format_name, ShardDataset)(root, _manifest=manifest, **kwargs)
