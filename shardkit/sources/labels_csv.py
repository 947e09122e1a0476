"""The labels CSV of an image tree (--labels FILE): one row per image, a path and a label.

Independent of the CSV table source: a small file read with Python's csv module. The delimiter
is --delimiter, or sniffed among , ; TAB | from the first lines. Bad rows (empty path or label,
a path outside SRC, a path listed twice) are skipped and listed in skipped.jsonl with their line,
never fatal. Paths are relative to SRC, or absolute inside SRC. Classes are the distinct labels,
sorted numerically when every label is an integer ("2" before "10"), else as strings.
"""
from __future__ import annotations

import csv
import os
from typing import Any, Dict, List, Optional, Set, Tuple

from ..errors import SourceError, UsageError
from .base import Skipped

SNIFF_DELIMITERS = ",;\t|"
SNIFF_BYTES = 64 * 1024


def read_labels_csv(root: str, labels_file: str, path_column: str, label_column: str,
                    delimiter: Optional[str], images: Set[str]) -> Tuple[List[Tuple[str, int]], List[str], int,
                                                                         List[Skipped]]:
    """(items (relative path, label index) in path order, classes, images not listed, skipped rows)."""
    rows = _read_rows(labels_file, path_column, label_column, delimiter)
    skipped: List[Skipped] = []
    items: Dict[str, str] = {}
    for path, label, line in rows:
        if not path or not label:
            skipped.append(Skipped(labels_file, "empty path or label", line))
            continue
        rel = _relative(root, path)
        if rel is None:
            skipped.append(Skipped(labels_file, f"path {path!r} is outside SRC", line))
            continue
        if rel in items:
            skipped.append(Skipped(labels_file, f"path {path!r} is listed twice (the first row is kept)", line))
            continue
        items[rel] = label
    names = set(items.values())
    classes = sorted(names, key=class_sort_key(names))
    index = {name: number for number, name in enumerate(classes)}
    ordered = sorted(((rel, index[label]) for rel, label in items.items()), key=lambda item: tuple(item[0].split("/")))
    return ordered, classes, len(images - set(items)), skipped


def class_sort_key(names: Set[str]) -> Optional[Any]:
    """Integer-looking class names sort numerically ("2" before "10"); others as strings."""
    try:
        for name in names:
            int(name)
    except ValueError:
        return None
    return int


def _read_rows(labels_file: str, path_column: str, label_column: str,
               delimiter: Optional[str]) -> List[Tuple[Optional[str], Optional[str], int]]:
    try:
        with open(labels_file, newline="", encoding="utf-8-sig") as handle:
            chosen = _delimiter(delimiter, handle.read(SNIFF_BYTES))
            handle.seek(0)
            reader = csv.DictReader(handle, delimiter=chosen)
            header = reader.fieldnames or []
            for column in (path_column, label_column):
                if column not in header:
                    raise UsageError(f"no column {column!r} (columns: {', '.join(header)}; "
                                     f"delimiter {chosen!r})", path=labels_file)
            return [(_strip(row[path_column]), _strip(row[label_column]), reader.line_num) for row in reader]
    except OSError as exc:
        raise UsageError(f"cannot read labels CSV ({exc.strerror})", path=labels_file) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SourceError(f"not a readable UTF-8 CSV ({exc})", path=labels_file) from None


def _delimiter(given: Optional[str], head: str) -> str:
    """--delimiter as given ('tab' and '\\t' mean TAB), or the one the first lines use."""
    if given is not None:
        value = "\t" if given.lower() in ("tab", "\\t") else given
        if len(value) != 1 or value in ('"', "\n", "\r"):
            raise UsageError(f"--delimiter must be one character other than a quote or newline, not {given!r}")
        return value
    try:
        return csv.Sniffer().sniff(head, delimiters=SNIFF_DELIMITERS).delimiter
    except csv.Error:
        return ","


def _strip(value: Optional[str]) -> Optional[str]:
    return value.strip() if value is not None else None


def _relative(root: str, path: str) -> Optional[str]:
    """path as a POSIX path relative to root, or None when it leads outside root."""
    if os.path.isabs(path):
        for base, target in ((os.path.abspath(root), os.path.normpath(path)),
                             (os.path.realpath(root), os.path.realpath(path))):
            if os.path.commonpath([base, target]) == base and target != base:
                return os.path.relpath(target, base).replace(os.sep, "/")
        return None
    rel = os.path.normpath(path).replace(os.sep, "/")
    if rel == ".." or rel.startswith("../") or rel == ".":
        return None
    return rel


__all__ = ["class_sort_key", "read_labels_csv"]
