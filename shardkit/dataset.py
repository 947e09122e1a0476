"""The read side: a torch Dataset over a shardkit DST, for any registered format."""
from __future__ import annotations

import bisect
import os
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch.utils.data

from .codecs.decode import make_decoder
from .errors import CorruptSampleError, CorruptShardError, ManifestError, UsageError
from .formats import get_format
from .formats.base import ShardReader
from .handles import HANDLES
from .integrity import hash_file
from .manifest import Manifest, load_manifest
from .records import Encoded


#: What a format's library may raise on a damaged file that its own checks did not catch;
#: the read side reports it as CorruptShardError / CorruptSampleError, never as itself.
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
            return make_decoder(self.manifest.schema, self.decode)
        if self.manifest.schema.kind != "tabular":
            raise UsageError(f"{self.root}: as_dict=True applies to tabular (CSV) datasets only", path=self.root)
        from .codecs.tabular import make_tabular_decoder
        return make_tabular_decoder(self.manifest.schema, self.decode, as_dict=True)

    def __len__(self) -> int:
        return self._length

    # ---- access ------------------------------------------------------------------
    def locate(self, index: int) -> "tuple[int, int]":
        """(shard number, index within shard) of a global index."""
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"index {index} out of range for dataset of {self._length} samples")
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
            digest = hash_file(path)
        except OSError:
            raise CorruptShardError(f"{path}: shard {shard} is missing or unreadable", path=path) from None
        if digest != self.manifest.shards[shard].sha256:
            raise CorruptShardError(f"{path}: shard {shard} fails its sha256 check (its bytes changed after "
                                    "conversion)", path=path)
        self._hashed.add(key)

    def _open(self, shard: int) -> ShardReader:
        path = self._paths[shard]
        try:
            size = os.path.getsize(path)
        except OSError:
            raise CorruptShardError(f"{path}: shard {shard} is missing", path=path) from None
        if size != self._sizes[shard]:
            raise CorruptShardError(f"{path}: shard {shard} has {size} bytes, manifest says {self._sizes[shard]} "
                                    "(truncated or replaced)", path=path)
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

    def key(self, index: int) -> Optional[str]:
        """The source key of a sample: its path relative to SRC (image trees), "file:line" (CSV
        rows); None for a dataset written before keys were stored (format version 1)."""
        shard, local = self.locate(index)
        return self.reader(shard).key(local)

    def read_encoded(self, index: int) -> Encoded:
        """The stored record of a global index (CRC checked when verify_checksums)."""
        shard, local = self.locate(index)
        reader = self.reader(shard)
        path = self._paths[shard]
        try:
            encoded = reader.read(local)
        except CorruptShardError:
            raise
        except _READ_FAILURES as exc:
            raise CorruptSampleError(f"{path}: sample {local} (global index {index}) cannot be read "
                                     f"({type(exc).__name__}: {exc})", path=path,
                                     shard=self.manifest.shards[shard].path, index=local) from None
        if self.verify_checksums and not encoded.crc_ok():
            raise CorruptSampleError(f"{path}: sample {local} (global index {index}) fails its CRC32 check",
                                     path=path, shard=self.manifest.shards[shard].path, index=local)
        if self.verify_checksums and self._classes and not 0 <= encoded.label < self._classes:
            raise CorruptSampleError(f"{path}: sample {local} (global index {index}) has label {encoded.label}, "
                                     f"outside the {self._classes} classes", path=path,
                                     shard=self.manifest.shards[shard].path, index=local)
        return encoded

    def __getitem__(self, index: int) -> Any:
        encoded = self.read_encoded(index)
        sample = self._decoder(encoded.payload)
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


def open_dataset(root: "str | os.PathLike[str]", **kwargs: Any) -> ShardDataset:
    """Open DST with the Dataset class of the format its manifest names."""
    manifest = load_manifest(root)
    classes = {cls.format_name: cls for cls in ShardDataset.__subclasses__()}
    return classes.get(manifest.format_name, ShardDataset)(root, **kwargs)
