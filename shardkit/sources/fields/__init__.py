"""Sources of samples of named fields: files that become dicts of fields for shardkit's Writer.

- sidecars.py: an image tree whose files sharing a stem are one sample (0001.jpg, 0001.txt,
  0001.json, 0001.cls), each field named by its extension (the WebDataset convention), read from
  a folder, an archive or a URL (files.py);
- tables.py: a table (CSV, TSV, JSON Lines, Parquet) with a column of image paths or of encoded
  image bytes, plus other columns.

A source scans its input once (the items, their fields, a label field's classes) and reads items
by their numbers (a batch at a time), so that the conversion can take them in any order and resume.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple, Union

from ...schema import FieldSpec
from ..base import Skipped

#: The image options a source's image fields take (convert's --image-mode, --size, ...).
ImageFieldOptions = Dict[str, Any]


@dataclass(frozen=True)
class FieldItem:
    """One input turned into a sample: its key, its fields' values, the bytes read for it."""

    key: str
    sample: Dict[str, Any]
    source_bytes: int


class FieldSource(abc.ABC):
    """The items of a source of named fields, in its own (sorted) order."""

    #: What the manifest's source record calls this kind.
    kind = ""
    #: The order its items are written in by default: "shuffled" (a seeded permutation) or "source".
    default_order = "shuffled"

    def __init__(self, root: str, fields: Tuple[FieldSpec, ...], skipped: List[Skipped]) -> None:
        self.root, self.fields, self.scan_skipped = root, fields, skipped

    @abc.abstractmethod
    def __len__(self) -> int:
        """How many items (samples to be) there are."""

    @abc.abstractmethod
    def read(self, index: int) -> Union[FieldItem, Skipped]:
        """Item `index` read as a sample, or why it cannot be one."""

    def key(self, index: int) -> str:
        """Item `index`'s key, without reading it (the sources of files know it from their scan)."""
        raise NotImplementedError(f"a {self.kind} does not name its items before reading them")

    def read_many(self, indices: Sequence[int]) -> List[Union[FieldItem, Skipped]]:
        """Items read as samples, in the order asked (a source may read them together)."""
        return [self.read(index) for index in indices]

    def close(self) -> None:
        """Release what the source holds open (nothing, for sources of files)."""

    def summary(self) -> Dict[str, Any]:
        """What the manifest's source summary records of the scan."""
        return {"items": len(self), "fields": [spec.name for spec in self.fields],
                "scan_skipped": len(self.scan_skipped)}


def image_spec(name: str, options: ImageFieldOptions, optional: bool) -> FieldSpec:
    """An image field with the conversion's image options."""
    size = options.get("size")
    validate = options.get("validate")
    return FieldSpec(name, "image", optional=optional, mode=options.get("mode"), resize=options.get("resize"),
                     quality=options.get("quality"), size=None if size is None else tuple(size),
                     validate=None if validate in (None, "full") else validate)


def class_names(values: List[str]) -> Tuple[str, ...]:
    """A label field's classes: its distinct values sorted, as numbers when all are whole numbers
    (so "2" comes before "10"), else as text."""
    distinct = set(values)
    if distinct and all(value.lstrip("-").isdigit() for value in distinct):
        return tuple(sorted(distinct, key=int))
    return tuple(sorted(distinct))
