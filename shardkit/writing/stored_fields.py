"""A dataset of named fields as SRC: re-shard it, change its format or compression, or copy the
samples chosen by --classes, --keys and --fraction, without the raw data.

Each sample's stored values are copied as they are (payload, presence, CRC32, key), each read
with its CRC32 checked, so a damaged value is skipped and listed, never copied. The schema comes
from the old manifest; --classes keeps a label field's chosen classes, relabelled 0..k-1 in their
old order (the one value that changes, with its CRC32). The items of this source are the kept
samples, in stored order (sources/selection.py chooses them, as for a dataset of one payload).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..codecs.fields import column_schemas
from ..errors import CorruptSampleError, UsageError
from ..manifest import Manifest
from ..options import ReshardOptions
from ..read.fields_dataset import FieldsDataset
from ..records import Encoded, payload_crc32
from ..schema import FieldSpec
from ..sources.base import Skipped
from ..sources.fields import FieldSource
from ..sources.selection import Selection, select

#: Samples whose labels (or keys) are read at once while choosing.
_CHUNK = 4096


@dataclass(frozen=True)
class StoredItem:
    """A sample of another dataset: its key and its stored value of every column, as copied."""

    key: str
    record: Dict[str, Encoded]
    source_bytes: int


class StoredFields(FieldSource):
    """The samples of a dataset of named fields at root, in stored order (those kept by the filters)."""

    kind = "shardkit_dataset"
    #: Keeping the stored order keeps ds[i] the same sample across a format change.
    default_order = "source"

    def __init__(self, root: str, manifest: Manifest, options: ReshardOptions, label_field: Optional[str],
                 seed: int, compression: Optional[str]) -> None:
        self.root, specs = root, list(manifest.schema.fields)
        self._label = _label_field(specs, label_field, options, root)
        self.manifest = manifest
        self._ds = FieldsDataset(root, decode=None, verify_checksums=True, _manifest=manifest)
        #: whether each column stores rows of an array (else bytes), as its payloads are copied
        self._arrays = {column: schema.is_array for column, schema in column_schemas(manifest.schema).items()}
        classes = list(self._label.classes or ()) if self._label is not None else []
        self.selection: Optional[Selection] = select(classes, self._labels, self._keys, options.classes,
                                                     options.keys, options.fraction, seed, root)
        #: old label -> new label of the label field under --classes, else None
        self._relabel: Optional[np.ndarray] = None
        if self.selection is not None and self.selection.relabel is not None and self._label is not None:
            self._relabel = self.selection.relabel
            specs[specs.index(self._label)] = dataclasses.replace(self._label, classes=tuple(self.selection.classes))
        if compression is not None:
            specs = [dataclasses.replace(spec, compression=compression) for spec in specs]
        super().__init__(root, tuple(specs), [])

    def __len__(self) -> int:
        return len(self._ds) if self.selection is None else len(self.selection.kept)

    def empty_hint(self) -> str:
        return "; --classes, --keys and --fraction together keep no sample" if self.selection is not None else ""

    def summary(self) -> Dict[str, Any]:
        facts = {"source_format": self.manifest.format_name, "source_shards": len(self.manifest.shards),
                 "source_samples": len(self._ds), "fields": [spec.name for spec in self.fields]}
        if self.selection is not None:
            facts.update({"selected": len(self.selection.kept), "selection": dict(self.selection.record)})
        return facts

    # ---- reading -------------------------------------------------------------------------
    def read(self, index: int) -> Union[StoredItem, Skipped]:  # type: ignore[override]
        return self.read_many([index])[0]

    def read_many(self, indices: Sequence[int]) -> List[Union[StoredItem, Skipped]]:  # type: ignore[override]
        """Items by their numbers: read together, or one by one when one of them is damaged (that
        one skipped, naming its file and sample)."""
        wanted = [self._stored_index(index) for index in indices]
        try:
            records = self._ds.read_encoded_many(wanted)
        except CorruptSampleError:
            return [self._read_one(index) for index in wanted]
        return [self._item(index, record) for index, record in zip(wanted, records)]

    def _stored_index(self, item: int) -> int:
        return item if self.selection is None else int(self.selection.kept[item])

    def _read_one(self, index: int) -> Union[StoredItem, Skipped]:
        try:
            return self._item(index, self._ds.read_encoded(index))
        except CorruptSampleError as exc:
            return Skipped(exc.path or self.root, f"{exc.detail()} ({'; '.join(exc.location()[1:])})")

    def _item(self, index: int, record: Dict[str, Encoded]) -> StoredItem:
        """The sample as copied: every value's own bytes (not a view of a shard that may close),
        its key, and a relabelled label field under --classes."""
        key = self._ds.key(index)
        if key is None:                 # never for a dataset of fields; kept for a crafted one
            key = f"#{index}"
        copied: Dict[str, Encoded] = {}
        size = 0
        for column, stored in record.items():
            payload = stored.payload
            payload = np.array(payload, copy=True) if self._arrays[column] else bytes(payload)
            crc = stored.crc32
            if self._relabel is not None and self._label is not None and column == self._label.name \
                    and stored.label >= 0:
                payload = np.array([self._relabel[int(payload[0])]], dtype="<i8")
                crc = payload_crc32(payload)
            copied[column] = Encoded(payload, stored.label, crc, key)
            size += len(payload) if isinstance(payload, bytes) else int(payload.nbytes)
        return StoredItem(key, copied, size)

    # ---- what the filters read ---------------------------------------------------------------
    def _labels(self) -> np.ndarray:
        """The label field's value of every sample (-1 where absent or damaged); all -1 without one."""
        count = len(self._ds)
        labels = np.full(count, -1, dtype=np.int64)
        if self._label is None:
            return labels
        with FieldsDataset(self.root, fields=(self._label.name,), decode=None, verify_checksums=True,
                           _manifest=self.manifest) as column:
            for start in range(0, count, _CHUNK):
                chunk = range(start, min(start + _CHUNK, count))
                for index, stored in zip(chunk, _records(column, chunk)):
                    if stored is not None and stored.label >= 0:
                        labels[index] = int(stored.payload[0])
        return labels

    def _keys(self) -> List[str]:
        return [self._ds.key(index) or f"#{index}" for index in range(len(self._ds))]

    def close(self) -> None:
        self._ds.close()


def _records(column: Any, chunk: range) -> List[Optional[Encoded]]:
    """One column's stored values of a chunk of samples; None for a damaged one."""
    try:
        return [record[column.fields[0]] for record in column.read_encoded_many(chunk)]
    except CorruptSampleError:
        out: List[Optional[Encoded]] = []
        for index in chunk:
            try:
                out.append(column.read_encoded(index)[column.fields[0]])
            except CorruptSampleError:
                out.append(None)
        return out


def _label_field(specs: List[FieldSpec], name: Optional[str], options: ReshardOptions,
                 root: str) -> Optional[FieldSpec]:
    """The label field that --classes and --fraction go by: the one named by --label-field, else
    the dataset's only label field; None when the filters need none."""
    labels = [spec for spec in specs if spec.type == "label"]
    if name is not None:
        chosen = [spec for spec in specs if spec.name == name]
        if not chosen or chosen[0].type != "label":
            known = ", ".join(spec.name for spec in labels) or "none"
            raise UsageError(f"--label-field {name!r} is not a label field of this dataset (its label fields: "
                             f"{known})", path=root)
        return chosen[0]
    if len(labels) > 1 and (options.classes is not None or options.fraction is not None):
        raise UsageError(f"the dataset has {len(labels)} label fields ({', '.join(spec.name for spec in labels)}); "
                         "name the one --classes and --fraction go by with --label-field", path=root)
    if options.classes is not None and not labels:
        raise UsageError("--classes needs a dataset with a label field; this one has none", path=root)
    return labels[0] if labels else None


def open_stored(src: str, manifest: Manifest, options: Dict[str, Any]) -> StoredFields:
    """The dataset of named fields at src as a source, with the filters and compression given."""
    chosen = ReshardOptions.take({name: options.get(name) for name in ("classes", "keys", "fraction")})
    seed = int(options.get("seed") or 0)
    return StoredFields(os.path.abspath(src), manifest, chosen, options.get("label_field"), seed,
                        options.get("compression"))


__all__: Tuple[str, ...] = ("StoredFields", "StoredItem", "open_stored")
