"""Which of NEW_SRC's inputs an append adds: those whose key the dataset does not hold yet (an image
file's path, a table row's "file:line"). An input whose key is already in DST with the same stored
bytes and label is skipped (and reported); one with other content is refused, since a key names one
sample. Also the options check: an append takes the dataset's recorded options, and an option given
that says otherwise is refused."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import numpy as np

from ..errors import ConversionError, UsageError
from ..formats import get_format
from ..formats.checked import open_checked, recorded_options
from ..manifest import Manifest
from ..option_types import typed_value
from ..options import RunOptions, option_specs
from ..records import EncodedRows
from ..sources import Skipped, Source
from ..sources.base import ConvertedRun
from .recorded_options import absolute

#: convert() keywords whose default is not None: given at that default, they were not given.
_DEFAULTS = {"format": "hdf5", "no_labels": False, "sidecars": False}


def check_options(given: Dict[str, Any], recorded: Dict[str, Any], dst: str) -> None:
    """UsageError for an option given to an append that differs from what the dataset records."""
    specs = {spec.name: spec for spec in option_specs()}
    for name, value in sorted(given.items()):
        if name in RunOptions.names() or value is None or _DEFAULTS.get(name, object()) == value:
            continue
        if name == "part":
            raise UsageError("--part does not apply to --append", path=dst)
        spec = specs[name]
        wanted = typed_value(spec, value)
        have = recorded.get(name)
        if spec.kind == "path":
            wanted = absolute(wanted)
        if have is None or typed_value(spec, have) != wanted:
            was = "without it" if have is None else f"with {spec.flag.spelling} {have}"
            raise UsageError(f"{spec.flag.spelling} {value} conflicts with the dataset (converted {was}); "
                             "--append takes the dataset's own options", path=dst)


@dataclass
class ExistingSample:
    shard: int
    local: int
    index: int


def dataset_keys(manifest: Manifest, dst: str) -> Dict[str, ExistingSample]:
    """Every key of the dataset, with where its sample is."""
    fmt = get_format(manifest.format_name)
    options = recorded_options(fmt, manifest, dst)
    found: Dict[str, ExistingSample] = {}
    for shard, entry in enumerate(manifest.shards):
        reader = open_checked(fmt, manifest, dst, shard, options)
        try:
            for local in range(len(reader)):
                found[str(reader.key(local))] = ExistingSample(shard, local, entry.first_index + local)
        finally:
            reader.close()
    return found


def new_items(source: Source, manifest: Manifest, dst: str, src: str) -> Tuple[np.ndarray, List[str]]:
    """(items of source to append, keys skipped as already in DST); ConversionError naming the
    first input whose key DST holds with other content."""
    keys = source.item_keys()
    if keys is None:
        raise UsageError(f"--append takes image trees and local tables; this {source.kind} source cannot be "
                         "appended to a dataset (convert all of its inputs again instead)", path=src)
    maybe = source.held_items(manifest)
    existing = dataset_keys(manifest, dst) if maybe is None or len(maybe) else {}
    candidates = np.array([item for item in (range(len(keys)) if maybe is None else maybe.tolist())
                           if keys[item] in existing], dtype=np.int64)
    duplicates: List[str] = []
    if len(candidates):
        fmt = get_format(manifest.format_name)
        options = recorded_options(fmt, manifest, dst)
        readers: Dict[int, Any] = {}
        try:
            for key, payload, label in _payloads(source, candidates):
                where = existing[key]
                if where.shard not in readers:      # one open per shard, however many of its inputs come again
                    readers[where.shard] = open_checked(fmt, manifest, dst, where.shard, options)
                stored = readers[where.shard].read(where.local)
                if payload is None or _bytes(stored.payload) != payload or \
                        _class(manifest.classes, stored.label) != _class(source.classes, label):
                    raise ConversionError(f"{key!r} is already in DST (sample {where.index}) with other content; "
                                          "an append adds new inputs only (give it another name, or convert "
                                          "again)", path=src)
                duplicates.append(key)
        finally:
            for reader in readers.values():
                reader.close()
    kept = np.ones(len(keys), dtype=bool)          # a mask, not setdiff1d: that sorts every item (0.2 s a million)
    kept[candidates] = False
    keep = np.flatnonzero(kept).astype(np.int64)
    return keep, duplicates


def _payloads(source: Source, items: np.ndarray) -> List[Tuple[str, Any, int]]:
    """(key, stored bytes or None where the input does not convert, label) of each item, in order."""
    keys = source.item_keys() or []
    found: List[Tuple[str, Any, int]] = []
    for outcome in source.encode_items(items):
        if isinstance(outcome, Skipped):
            found.append((keys[int(items[len(found)])], None, -1))
        elif isinstance(outcome, ConvertedRun):
            samples = outcome.samples
            rows = samples if not isinstance(samples, EncodedRows) else list(samples)
            found.extend((str(sample.key), _bytes(sample.payload), int(sample.label)) for sample in rows)
        else:
            sample = outcome.sample
            found.append((str(sample.key), _bytes(sample.payload), int(sample.label)))
    return found


def _class(classes: List[str], label: int) -> Any:
    """A label as its class name where there are classes (an input's class numbers are its source's until
    restrict), else as stored."""
    return classes[label] if classes and 0 <= label < len(classes) else label


def _bytes(payload: Any) -> bytes:
    return payload.tobytes() if isinstance(payload, np.ndarray) else bytes(payload)


__all__ = ["check_options", "dataset_keys", "new_items"]
