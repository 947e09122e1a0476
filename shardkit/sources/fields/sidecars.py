"""An image tree with sidecar files: the files below SRC that share a stem are one sample, each a
field named by its extension (the WebDataset convention: the stem ends at the first dot of the
file name, `0001.seg.png` is field `seg_png` of sample `0001`).

The type of a field comes from its extension: an allowed image extension -> image, .txt -> text,
.json -> json (parsed, never executed), the field named by `label_field` -> label (the file's text,
stripped, is the class name; the classes are the sorted distinct names), anything else -> bytes. A
field that some samples lack is optional. Links out of SRC are never followed (sources/tree.py).
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple, Union

from ...codecs.pillow import image_extensions
from ...errors import SampleError, SourceError, UsageError
from ...schema import FieldSpec
from ..base import Skipped
from ..tree import LinkOut, read_inside, walk_files
from . import FieldItem, FieldSource, ImageFieldOptions, class_names, image_spec

_FIELD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
TEXT_EXTENSIONS = ("txt", "text")
#: Files of at most this size are read to find a label field's classes.
MAX_LABEL_BYTES = 4096


def split_name(rel: str) -> Tuple[str, str]:
    """(key, field name) of a file below SRC: the key is its folder and the name before the first
    dot, the field its extension after that dot (lower case, further dots as "_"); ("", "") for a
    file with no such extension, or a hidden one."""
    folder, _, name = rel.rpartition("/")
    stem, dot, ext = name.partition(".")
    if not dot or not stem or not ext:
        return "", ""
    return (f"{folder}/{stem}" if folder else stem), ext.lower().replace(".", "_")


class SidecarTree(FieldSource):
    """The samples of an image tree with sidecar files (see the module doc)."""

    kind = "sidecar tree"

    def __init__(self, root: str, label_field: Optional[str] = None, image: Optional[ImageFieldOptions] = None) -> None:
        self.root = root
        links: List[LinkOut] = []
        groups: Dict[str, Dict[str, str]] = {}
        self.ignored = 0
        for rel in walk_files(root, links):
            key, field = split_name(rel)
            if not field or not _FIELD_NAME.match(field):
                self.ignored += 1
                continue
            groups.setdefault(key, {})[field] = rel
        self.real_root = os.path.realpath(root)
        self.keys = sorted(groups, key=lambda key: tuple(key.split("/")))
        self.files = [groups[key] for key in self.keys]
        skipped = [Skipped(link.path, link.reason()) for link in links]
        super().__init__(root, self._fields(label_field, image or {}), skipped)

    def _fields(self, label_field: Optional[str], image: ImageFieldOptions) -> Tuple[FieldSpec, ...]:
        counts: Dict[str, int] = {}
        for files in self.files:
            for field in files:
                counts[field] = counts.get(field, 0) + 1
        if not counts:
            raise SourceError("holds no file with an extension (sidecar trees name each field by its files' "
                              "extension: 0001.jpg, 0001.txt)", path=self.root)
        if label_field is not None and label_field not in counts:
            raise UsageError(f"--label-field {label_field!r} names no extension of the tree's files "
                             f"({', '.join(sorted(counts))})", path=self.root)
        images = {ext.lstrip(".").replace(".", "_") for ext in image_extensions()}
        specs = []
        for field in sorted(counts):
            optional = counts[field] < len(self.files)
            if field == label_field:
                specs.append(FieldSpec(field, "label", optional=optional, classes=self._classes(field)))
            elif field.rpartition("_")[2] in images:
                specs.append(image_spec(field, image, optional))
            else:
                kind = "text" if field in TEXT_EXTENSIONS else "json" if field == "json" else "bytes"
                specs.append(FieldSpec(field, kind, optional=optional))
        return tuple(specs)

    def _classes(self, field: str) -> Tuple[str, ...]:
        """The label field's classes: every label file's stripped text (files that cannot be read
        as short UTF-8 text are left to their sample, which is then skipped)."""
        names = []
        for files in self.files:
            if field in files:
                try:
                    names.append(self._label(files[field]))
                except (OSError, SampleError):
                    continue
        if not names:
            raise SourceError(f"no {field} file holds a class name", path=self.root)
        return class_names(names)

    def _label(self, rel: str) -> str:
        data = self.read_file(rel)
        if len(data) > MAX_LABEL_BYTES:
            raise SampleError(f"a label file holds {len(data)} bytes; a class name is at most {MAX_LABEL_BYTES}")
        try:
            text = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise SampleError("a label file is not UTF-8 text") from None
        if not text:
            raise SampleError("a label file is empty")
        return text

    def read_file(self, rel: str) -> bytes:
        """A file of the tree, read only if it lies inside SRC (a link is followed only there)."""
        path = os.path.join(self.root, rel)
        return read_inside(self.real_root, path, link=os.path.islink(path))

    def __len__(self) -> int:
        return len(self.keys)

    def read(self, index: int) -> Union[FieldItem, Skipped]:
        sample: Dict[str, Any] = {}
        total = 0
        for spec in self.fields:
            rel = self.files[index].get(spec.name)
            if rel is None:
                continue
            try:
                sample[spec.name], size = self._value(spec, rel)
            except OSError as exc:
                return Skipped(rel, f"cannot be read ({exc.strerror or exc})")
            except SampleError as exc:
                return Skipped(rel, exc.problem or str(exc))
            total += size
        return FieldItem(self.keys[index], sample, total)

    def _value(self, spec: FieldSpec, rel: str) -> Tuple[Any, int]:
        if spec.type == "label":
            text = self._label(rel)
            return text, len(text)
        data = self.read_file(rel)
        if spec.type == "text":
            try:
                return data.decode("utf-8"), len(data)
            except UnicodeDecodeError as exc:
                raise SampleError(f"text is not UTF-8 ({exc.reason} at byte {exc.start})") from None
        if spec.type == "json":
            try:
                return json.loads(data), len(data)
            except (ValueError, RecursionError) as exc:
                raise SampleError(f"JSON does not parse ({str(exc)[:80]})") from None
        return data, len(data)

    def summary(self) -> Dict[str, Any]:
        return {**super().summary(), "ignored": self.ignored}
