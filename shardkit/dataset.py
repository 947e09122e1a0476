"""The read side: a torch Dataset over a shardkit DST, for any registered format."""
from __future__ import annotations

import bisect
import operator
import os
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch.utils.data

from .codecs.decode import make_decoder
from .errors import CorruptSampleError, CorruptShardError, ManifestError, SampleError, UsageError
from .formats import get_format
from .formats.base import ShardReader
from .handles import HANDLES
from .integrity import NotAShardFile, WrongSize, hash_shard_file, open_regular
from .manifest import Manifest, load_manifest
from .records import Encoded


#: What a format's library may raise on a damaged file that its own checks did not catch;
#: the read side reports it as CorruptShardError / CorruptSampleError, never as itself.
#: The keywords of ShardDataset itself (suggested when a format option is misspelt).
DATASET_OPTIONS = ("decode", "transform", "target_transform", "verify_checksums", "max_open_shards", "as_dict",
                   "return_key")
_READ_FAILURES = (OSError, ValueError, KeyError, IndexError, RuntimeError, TypeError, EOFError)


class ShardDataset(torch.utils.data.Dataset):
    """Random access to every sample of a shardkit dataset: ds[i] -> (sample, label) or sample.

    File handles are opened lazily per process and kept in a bounded LRU, so the dataset
    pickles without them and works in DataLoader workers under fork and spawn.
    """

    format_name: Optional[str] = None

    def __init__(self, root: "str | os.PathLike[str]", decode: Optional[str] = "pil",
                 transform: Optional[Callable[[Any], Any]] = None,
                 target_transform: Optional[Callable[[Any], Any]] = None,
                 verify_checksums: "bool | str" = False, max_open_shards: int = 128, as_dict: bool = False,
                 return_key: bool = False, **format_options: Any) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.manifest: Manifest = load_manifest(self.root)
        if self.format_name is not None and self.manifest.format_name != self.format_name:
            raise UsageError(f"{self.root}: holds {self.manifest.format_name} shards, not {self.format_name}; "
                             "use shardkit.open_dataset to pick the right reader", path=self.root)
        fmt = get_format(self.manifest.format_name)
        if self.manifest.format_version > fmt.version:
            raise ManifestError(f"{self.root}: {fmt.name} format version {self.manifest.format_version} is newer "
                                f"than this shardkit reads ({fmt.version}); upgrade shardkit", path=self.root)
        fmt.reader_options.from_dict(format_options, f"open_dataset ({fmt.name})", also=DATASET_OPTIONS)
        if return_key and self.manifest.format_version < fmt.keys_since:
            raise UsageError(f"{self.root}: written with {fmt.name} format version {self.manifest.format_version}, "
                             f"before samples stored their keys; return_key needs version {fmt.keys_since} "
                             "(re-shard it: shardkit convert OLD NEW keys each sample by its index)", path=self.root)
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
        self.as_dict = as_dict
        self.return_key = return_key
        self._decoder = self._make_decoder()
        self._labeled = self.manifest.schema.labeled
        self._classes = len(self.manifest.classes) if self._labeled else 0
        shards = self.manifest.shards
        self._paths: List[str] = [os.path.join(self.root, entry.path) for entry in shards]
        self._sizes = np.array([entry.size for entry in shards], dtype=np.int64)
        self._counts = np.array([entry.num_samples for entry in shards], dtype=np.int64)
        #: shard_starts[k] is the global index of shard k's first sample; the last entry is len(self).
        self.shard_starts = np.zeros(len(shards) + 1, dtype=np.int64)
        np.cumsum(self._counts, out=self.shard_starts[1:])
        self._starts: List[int] = self.shard_starts.tolist()   # one per shard; bisect on a list is fast
        self._length = int(self.shard_starts[-1])
        # Readers got from HANDLES while its generation was _known_generation: all still open.
        self._known: Dict[int, ShardReader] = {}
        self._known_generation = -1
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
            raise UsageError(f"{self.root}: as_dict=True applies to tabular (CSV) datasets only", path=self.root)
        from .codecs.tabular import make_tabular_decoder
        return make_tabular_decoder(self.manifest.schema, self.decode, as_dict=True)

    def __len__(self) -> int:
        return self._length

    # ---- access ------------------------------------------------------------------
    def locate(self, index: Any) -> "tuple[int, int]":
        """(shard number, index within shard) of a global index."""
        index = sample_index(index, self._length)
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, index - self._starts[shard]

    def reader(self, shard: int) -> ShardReader:
        """The open reader of a shard (opened in this process on first use)."""
        generation = HANDLES.generation
        if self._known_generation != generation:    # HANDLES closed a reader or the process changed
            self._known = {}
            self._known_generation = generation
        reader = self._known.get(shard)
        if reader is None:
            if self.verify_checksums == "full":
                self._check_sha256_once(shard)
            reader = HANDLES.get(self._paths[shard], lambda: self._open(shard), self.max_open_shards)
            # Another dataset of the process may have opened the path after it was replaced.
            self.manifest.check_identity(reader.dataset_id, self._paths[shard], shard)
            if HANDLES.generation == generation:
                self._known[shard] = reader
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
            raise CorruptShardError(f"{path}: shard {shard} is missing, unreadable or not a regular file "
                                    f"inside the dataset ({exc})", path=path) from None
        if digest != self.manifest.shards[shard].sha256:
            raise CorruptShardError(f"{path}: shard {shard} fails its sha256 check (its bytes changed after "
                                    "conversion)", path=path)
        self._hashed.add(key)

    def _open(self, shard: int) -> ShardReader:
        path = self._paths[shard]
        try:
            os.close(open_regular(path, self.root, int(self._sizes[shard])))
        except WrongSize as exc:
            raise CorruptShardError(f"{path}: shard {shard} has {exc.size} bytes, manifest says "
                                    f"{self._sizes[shard]} (truncated or replaced)", path=path) from None
        except NotAShardFile as exc:
            raise CorruptShardError(f"{exc}; shard {shard} is read only as a regular file inside the dataset",
                                    path=path) from None
        except OSError:
            raise CorruptShardError(f"{path}: shard {shard} is missing", path=path) from None
        fmt = get_format(self.manifest.format_name)
        try:
            reader = fmt.open_reader(path, self.manifest.schema, self._format_options)
        except CorruptShardError:
            raise
        except _READ_FAILURES as exc:
            raise CorruptShardError(f"{path}: shard {shard} cannot be opened ({type(exc).__name__}: {exc})",
                                    path=path) from None
        try:
            self.manifest.check_identity(reader.dataset_id, path, shard)
            if len(reader) != self._counts[shard]:
                raise CorruptShardError(f"{path}: shard {shard} holds {len(reader)} samples, manifest says "
                                        f"{self._counts[shard]}", path=path)
        except CorruptShardError:
            reader.close()
            raise
        return reader

    def key(self, index: Any) -> Optional[str]:
        """The source key of a sample: its path relative to SRC (image trees), "file:row" (table
        rows); None for a dataset written before keys were stored (format version 1)."""
        shard, local = self.locate(sample_index(index, self._length))
        return self.reader(shard).key(local)

    def read_encoded(self, index: Any) -> Encoded:
        """The stored record of a global index (CRC checked when verify_checksums)."""
        return self._read(sample_index(index, self._length))

    def _read(self, index: int) -> Encoded:
        """read_encoded for an index already checked by sample_index (the per-sample path)."""
        shard, local = self.locate(index)
        reader = self.reader(shard)
        path = self._paths[shard]
        where: Dict[str, Any] = {"shard": self.manifest.shards[shard].path, "global_index": index}
        try:
            encoded = reader.read(local)
        except CorruptSampleError as exc:      # found inside the format: add what only the dataset knows
            exc.shard, exc.global_index = where["shard"], index
            raise
        except CorruptShardError:
            raise
        except _READ_FAILURES as exc:
            raise CorruptSampleError(path, local, f"cannot be read ({type(exc).__name__}: {exc})", **where) from None
        if self.verify_checksums and not encoded.crc_ok():
            raise CorruptSampleError(path, local, "fails its CRC32 check", **where)
        if self.verify_checksums and self._classes and not 0 <= encoded.label < self._classes:
            raise CorruptSampleError(path, local, f"has label {encoded.label}, outside the {self._classes} classes",
                                     **where)
        return encoded

    def __getitem__(self, index: Any) -> Any:
        index = sample_index(index, self._length)
        return self.finish(self._read(index), index)

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
        key = (self.key(index),) if self.return_key else ()
        if not self._labeled:
            return (sample, *key) if key else sample
        label: Any = encoded.label
        if self.target_transform is not None:
            label = self.target_transform(label)
        return (sample, label, *key)

    def _undecodable(self, index: Optional[int], exc: SampleError) -> CorruptShardError:
        """The error for stored bytes that do not decode, naming the shard and sample."""
        if index is None:
            return CorruptShardError(f"a sample does not decode ({exc})", path=self.root)
        shard, local = self.locate(index)
        return CorruptSampleError(self._paths[shard], local, str(exc),
                                  shard=self.manifest.shards[shard].path, global_index=index)

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

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_decoder", None)     # rebuilt on unpickling; handles live in HANDLES, not here
        state["_known"], state["_known_generation"] = {}, -1
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


def open_dataset(root: "str | os.PathLike[str]", **kwargs: Any) -> ShardDataset:
    """Open DST with the Dataset class of the format its manifest names.

    Args:
        root: the dataset folder (DST of a conversion).
        **kwargs: passed to the dataset class: `decode` ("pil", "numpy", "tensor" or None for the
            stored payload), `transform`, `target_transform`, `verify_checksums` (False, True for
            each sample's CRC32, or "full" to also hash each shard once per process),
            `max_open_shards` (per-process LRU of open shards, default 128), `as_dict` (tabular
            rows as dicts), and format options such as `readahead=False`.

    Returns:
        An `HDF5Dataset`, `LMDBDataset` or `PTDataset`, all `torch.utils.data.Dataset`s.

    Raises:
        NotADatasetError: root holds no manifest.
        ManifestError: the manifest is damaged or from a newer shardkit.
    """
    manifest = load_manifest(root)
    classes = {cls.format_name: cls for cls in ShardDataset.__subclasses__()}
    return classes.get(manifest.format_name, ShardDataset)(root, **kwargs)
