"""An image tree with sidecar files: the files below SRC that share a stem are one sample, each a
field named by its extension (the WebDataset convention: the stem ends at the first dot of the
file name, `0001.seg.png` is field `seg_png` of sample `0001`).

The type of a field comes from its extension: an allowed image extension -> image, .txt -> text,
.json -> json (parsed, never executed), the field named by `label_field` -> label (the file's text,
stripped, is the class name; the classes are the sorted distinct names), anything else -> bytes. A
field that some samples lack is optional. The files come from files.py: a folder (links out of it
never followed), an archive (a WebDataset tar, a tar of them, a zip) or the objects below a URL.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ...codecs.pillow import image_extensions
from ...errors import SampleError, SourceError, UsageError
from ...schema import FieldSpec
from ..base import Skipped
from . import FieldItem, FieldSource, ImageFieldOptions, class_names, image_spec
from .files import FileRead, SampleFiles

_FIELD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
TEXT_EXTENSIONS = ("txt", "text")
#: Files of at most this size are read to find a label field's classes.
MAX_LABEL_BYTES = 4096
#: Files read at once (label files while scanning; the caller's batch of samples when converting).
READ_BATCH = 256


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

    def __init__(self, files: SampleFiles, label_field: Optional[str] = None,
                 image: Optional[ImageFieldOptions] = None) -> None:
        self.root, self.source_files = files.shown, files
        groups: Dict[str, Dict[str, str]] = {}
        self.ignored = 0
        for rel in files.rels:
            key, field = split_name(rel)
            if not field or not _FIELD_NAME.match(field):
                self.ignored += 1
                continue
            groups.setdefault(key, {})[field] = rel
        self.keys = sorted(groups, key=lambda key: tuple(key.split("/")))
        self.files = [groups[key] for key in self.keys]
        super().__init__(files.shown, self._fields(label_field, image or {}), list(files.skipped))

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
        rels = [files[field] for files in self.files if field in files]
        names = []
        for start in range(0, len(rels), READ_BATCH):
            for data in self.source_files.read_many(rels[start:start + READ_BATCH]):
                try:
                    if isinstance(data, SampleError):
                        raise data
                    names.append(_label(data))
                except SampleError:
                    continue
        if not names:
            raise SourceError(f"no {field} file holds a class name", path=self.root)
        return class_names(names)

    def __len__(self) -> int:
        return len(self.keys)

    def key(self, index: int) -> str:
        return self.keys[index]

    def read(self, index: int) -> Union[FieldItem, Skipped]:
        return self.read_many([index])[0]

    def read_many(self, indices: Sequence[int]) -> List[Union[FieldItem, Skipped]]:
        """Items read with one read of all their files (an archive's neighbours in one request)."""
        wanted = [(index, spec, self.files[index][spec.name]) for index in indices for spec in self.fields
                  if spec.name in self.files[index]]
        datas = self.source_files.read_many([rel for _, _, rel in wanted])
        values: Dict[int, List[Tuple[FieldSpec, str, FileRead]]] = {index: [] for index in indices}
        for (index, spec, rel), data in zip(wanted, datas):
            values[index].append((spec, rel, data))
        return [self._item(index, values[index]) for index in indices]

    def _item(self, index: int, files: List[Tuple[FieldSpec, str, FileRead]]) -> Union[FieldItem, Skipped]:
        sample: Dict[str, Any] = {}
        total = 0
        for spec, rel, data in files:
            try:
                if isinstance(data, SampleError):
                    raise data
                sample[spec.name] = _value(spec, data)
            except SampleError as exc:
                return Skipped(rel, exc.problem or str(exc))
            total += len(data)
        return FieldItem(self.keys[index], sample, total)

    def summary(self) -> Dict[str, Any]:
        return {**super().summary(), "ignored": self.ignored}


def _label(data: bytes) -> str:
    """A label file's class name: its stripped UTF-8 text, or SampleError."""
    if len(data) > MAX_LABEL_BYTES:
        raise SampleError(f"a label file holds {len(data)} bytes; a class name is at most {MAX_LABEL_BYTES}")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SampleError("a label file is not UTF-8 text") from None
    if not text:
        raise SampleError("a label file is empty")
    return text


def _value(spec: FieldSpec, data: bytes) -> Any:
    """A file's bytes as the value of its field, or SampleError."""
    if spec.type == "label":
        return _label(data)
    if spec.type == "text":
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SampleError(f"text is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    if spec.type == "json":
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise SampleError(f"JSON does not parse ({str(exc)[:80]})") from None
    return data
