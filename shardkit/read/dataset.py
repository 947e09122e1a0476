"""The read side: a torch Dataset over a shardkit DST, for any registered format: the stored
records (read/shards.py) decoded, transformed and labelled as samples."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch.utils.data

from ..codecs.decode import make_decoder
from ..errors import CorruptSampleError, CorruptShardError, SampleError, UsageError
from ..formats import get_format
from ..manifest import Manifest, load_manifest
from ..records import Encoded
from .indices import sample_index, sample_indices
from .remote_files import REMOTE_OPTIONS, remote_files
from .shards import ShardRecords

#: The keywords of ShardDataset itself (suggested when a format option is misspelt).
DATASET_OPTIONS = ("decode", "transform", "target_transform", "verify_checksums", "max_open_shards", "as_dict",
                   "return_key", *REMOTE_OPTIONS)


class ClassNames:
    """`classes` and `class_to_idx` of a dataset, from its manifest."""

    manifest: Manifest

    @property
    def classes(self) -> List[str]:
        """Class names in label order (a dataset of fields: its first label field's)."""
        return list(self.manifest.classes)

    @property
    def class_to_idx(self) -> Dict[str, int]:
        """Class name -> label."""
        return {name: index for index, name in enumerate(self.manifest.classes)}


class ShardDataset(ClassNames, ShardRecords, torch.utils.data.Dataset):
    """Random access to every sample of a shardkit dataset: ds[i] -> (sample, label) or sample.

    The records come from ShardRecords (shards opened lazily per process by the dataset's own
    ShardCache, so the dataset pickles without them and works in DataLoader workers under fork and
    spawn; `open_shards()` opens them ahead for workers forked later, `close()` or a `with` block
    closes them); this class decodes, transforms and labels them.
    """

    keywords = DATASET_OPTIONS

    def __init__(self, root: "str | os.PathLike[str]", decode: Optional[str] = "pil",
                 transform: Optional[Callable[[Any], Any]] = None,
                 target_transform: Optional[Callable[[Any], Any]] = None,
                 verify_checksums: "bool | str" = False, max_open_shards: Optional[int] = None,
                 as_dict: bool = False, return_key: bool = False, _manifest: Optional[Manifest] = None,
                 **options: Any) -> None:
        super().__init__(root, verify_checksums=verify_checksums, max_open_shards=max_open_shards,
                         _manifest=_manifest, **options)
        fmt = get_format(self.manifest.format_name)
        if return_key and self.manifest.format_version < fmt.keys_since:
            raise UsageError(f"written with {fmt.name} format version {self.manifest.format_version}, "
                             f"before samples stored their keys; return_key needs version {fmt.keys_since} "
                             "(re-shard it: shardkit convert OLD NEW keys each sample by its index)", path=self.root)
        self.decode = decode
        self.transform = transform
        self.target_transform = target_transform
        self.as_dict = as_dict
        self.return_key = return_key
        self._decoder = self._make_decoder()
        self._labeled = self.manifest.schema.labeled

    # ---- metadata ----------------------------------------------------------------
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

    # ---- samples -----------------------------------------------------------------
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
        path, name = self._checks.where(shard)
        return CorruptSampleError(path, local, str(exc), shard=name, global_index=index)

    def _as_dict(self, row: Dict[str, Any], label: Any) -> Any:
        """as_dict=True: the label joins the row under its column name, then transform sees it all."""
        if self._labeled:
            row[self.manifest.schema.codec.get("label_column") or "label"] = \
                self.target_transform(label) if self.target_transform is not None else label
        return self.transform(row) if self.transform is not None else row

    def __getstate__(self) -> Dict[str, Any]:
        state = super().__getstate__()
        state.pop("_decoder", None)     # rebuilt on unpickling
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._decoder = self._make_decoder()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.root!r}, format={self.manifest.format_name}, "
                f"samples={self._length}, shards={len(self.manifest.shards)}, decode={self.decode!r})")


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
    """Open DST with the Dataset class of the format its manifest names.

    Args:
        root: the dataset folder (DST of a conversion), or its URL (s3://, gs://, http(s)://; the
            `remote` extra): then `cache_dir` (required), `cache_limit` (bytes or "20GB"; by
            default the whole dataset) and `storage_options` (given to fsspec) say how its shards
            are fetched, checked and cached locally (docs/remote.md).
        **kwargs: passed to the dataset class (a FieldsDataset for a dataset of named fields, which
            also takes `fields`, and `decode` per field: docs/fields.md): `decode` ("pil", "numpy",
            "tensor" or None for the stored payload), `transform`, `target_transform`,
            `verify_checksums` (False, True for each sample's CRC32, or "full" to also hash each
            shard once per process),
            `max_open_shards` (this dataset's shards kept open per process; default from the
            process's descriptor and map limits), `as_dict` (tabular rows as dicts), `return_key`
            (each sample also returns its source key), and format options such as `readahead=False`.

    Returns:
        An `HDF5Dataset`, `LMDBDataset` or `PTDataset` (a `FieldsDataset` for a dataset of named
        fields), all `torch.utils.data.Dataset`s.

    Raises:
        NotADatasetError: root holds no manifest.
        ManifestError: the manifest is damaged or from a newer shardkit.
        RemoteError: the manifest at a URL cannot be fetched.
    """
    remote = remote_files(root, *(kwargs.pop(name, None) for name in REMOTE_OPTIONS))
    manifest = remote.manifest if remote is not None else load_manifest(root)
    if manifest.fields is not None:
        from .fields_dataset import FieldsDataset
        return FieldsDataset(root, _manifest=manifest, _remote=remote, **kwargs)  # type: ignore[return-value]
    if "fields" in kwargs:
        raise UsageError("fields= applies to datasets of named fields; this one holds one payload per sample",
                         path=str(root))
    classes = {cls.format_name: cls for cls in ShardDataset.__subclasses__()}
    return classes.get(manifest.format_name, ShardDataset)(root, _manifest=manifest, _remote=remote, **kwargs)
