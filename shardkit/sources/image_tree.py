"""Image trees: ImageFolder layout, a tree plus a labels CSV, or an unlabeled tree."""
from __future__ import annotations

import csv
import errno
import hashlib
import os
from stat import S_ISBLK, S_ISCHR, S_ISDIR, S_ISFIFO, S_ISREG, S_ISSOCK
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..codecs.image import DEFAULT_BACKGROUND, ImageCodec, image_extensions, make_image_codec
from ..errors import SampleError, SourceError, UsageError
from ..records import Encoded
from .base import Converted, Outcome, Skipped, Source


def walk_files(root: str) -> Iterator[str]:
    """Relative POSIX paths of every non-directory entry below root, following directory
    links once (loops are cut), in no particular order."""
    seen = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            stat = os.stat(dirpath)
            key = (stat.st_dev, stat.st_ino)
        except OSError:
            dirnames[:] = []
            continue
        if key in seen:
            dirnames[:] = []
            continue
        seen.add(key)
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            rel = name if rel_dir == "." else os.path.join(rel_dir, name)
            yield rel.replace(os.sep, "/")


def _sort_key(rel: str) -> Tuple[str, ...]:
    return tuple(rel.split("/"))


class ImageTreeSource(Source):
    """Image files below a folder, each one sample; labels from folders, a CSV, or none."""

    kind = "image_tree"

    def __init__(self, root: str, paths: List[str], labels: np.ndarray, classes: List[str],
                 codec: ImageCodec, labeled: bool, summary: Dict[str, Any], skipped: List[Skipped],
                 stats: np.ndarray) -> None:
        self.root = root
        self.paths = paths
        self.labels = labels
        self.classes = classes
        self.codec = codec
        self.schema = codec.schema(labeled)
        self._summary = summary
        self._skipped = skipped
        self._stats = stats        # (size, mtime_ns) per item

    # ---- scanning -------------------------------------------------------------------
    @classmethod
    def scan(cls, root: str, options: Any) -> "ImageTreeSource":
        """Find the items of root according to the label options."""
        codec = make_image_codec(**_codec_options(options))
        extensions = image_extensions()
        all_files = sorted(walk_files(root), key=_sort_key)
        images = [rel for rel in all_files if os.path.splitext(rel)[1].lower() in extensions]
        summary: Dict[str, Any] = {"files_seen": len(all_files), "image_files": len(images),
                                   "other_files": len(all_files) - len(images)}
        labels_file = getattr(options, "labels", None)
        if getattr(options, "no_labels", False):
            if labels_file:
                raise UsageError("--labels and --no-labels contradict each other")
            items = [(rel, -1) for rel in images]
            classes: List[str] = []
        elif labels_file:
            items, classes, ignored = _items_from_labels_csv(
                root, labels_file, getattr(options, "path_column", None) or "path",
                getattr(options, "label_column", None) or "label", set(images))
            summary["unlisted_images_ignored"] = ignored
        else:
            items, classes, outside, empty = _items_from_folders(root, images)
            summary["files_outside_class_folders"] = outside
            summary["empty_classes"] = empty
        skipped: List[Skipped] = []
        paths: List[str] = []
        labels: List[int] = []
        stats: List[Tuple[int, int]] = []
        for rel, label in items:
            try:
                stat = os.stat(os.path.join(root, rel))
            except OSError as exc:
                skipped.append(Skipped(rel, _stat_failure(os.path.join(root, rel), exc)))
                continue
            if not S_ISREG(stat.st_mode):
                skipped.append(Skipped(rel, f"not a regular file ({_file_kind(stat.st_mode)})"))
                continue
            paths.append(rel)
            labels.append(label)
            stats.append((stat.st_size, stat.st_mtime_ns))
        return cls(root, paths, np.asarray(labels, dtype=np.int64), classes, codec,
                   labeled=not getattr(options, "no_labels", False), summary=summary, skipped=skipped,
                   stats=np.asarray(stats, dtype=np.int64).reshape(-1, 2))

    # ---- Source interface -------------------------------------------------------------
    def item_sizes(self) -> np.ndarray:
        keys = np.fromiter((len(rel.encode("utf-8", "surrogateescape")) for rel in self.paths), dtype=np.int64,
                           count=len(self.paths))
        return self.codec.stored_bytes(self._stats[:, 0]) + keys + 4     # + the key and its length

    def summary(self) -> Dict[str, Any]:
        return dict(self._summary)

    def plan_skipped(self) -> List[Skipped]:
        return list(self._skipped)

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        digest.update(repr((self.kind, self.schema.to_dict(), self.classes)).encode())
        for rel, label, (size, mtime) in zip(self.paths, self.labels.tolist(), self._stats.tolist()):
            digest.update(f"{rel}\0{label}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
        return digest.hexdigest()

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        for index in range(start, stop):
            rel = self.paths[index]
            try:
                data = read_regular_file(os.path.join(self.root, rel))
                payload, detected = self.codec.encode(data)
            except OSError as exc:
                yield Skipped(rel, f"cannot read ({exc.strerror or exc})")
                continue
            except SampleError as exc:
                yield Skipped(rel, str(exc))
                continue
            yield Converted(Encoded.make(payload, int(self.labels[index]), key=rel), len(data), detected)


def read_regular_file(path: str) -> bytes:
    """All bytes of a regular file; SampleError for anything else (a FIFO named .jpg would
    otherwise block the conversion forever, a device would never end)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not S_ISREG(mode):
            raise SampleError(f"not a regular file ({_file_kind(mode)})")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 24)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _stat_failure(path: str, exc: OSError) -> str:
    """Why an item cannot be used, in words (broken link, link loop, permission, ...)."""
    if exc.errno == errno.ELOOP:
        return "symbolic link loop (the link points back to itself)"
    if os.path.islink(path):
        return f"broken symbolic link (its target {os.readlink(path)!r} does not exist)"
    return f"cannot stat ({exc.strerror or exc})"


def _file_kind(mode: int) -> str:
    for test, word in ((S_ISDIR, "a directory"), (S_ISFIFO, "a FIFO"), (S_ISSOCK, "a socket"),
                       (S_ISCHR, "a character device"), (S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "a special file"


def _codec_options(options: Any) -> Dict[str, Any]:
    """ConvertOptions -> make_image_codec keywords (the codec validates their combination)."""
    size = getattr(options, "size", None)
    background = getattr(options, "background", None)
    return {"mode": getattr(options, "image_mode", "passthrough") or "passthrough",
            "resize": getattr(options, "resize", None),
            "size": tuple(size) if size else None,
            "quality": getattr(options, "quality", None),
            "background": DEFAULT_BACKGROUND if background is None else background}


def _items_from_folders(root: str, images: List[str]) -> Tuple[List[Tuple[str, int]], List[str], int, List[str]]:
    """ImageFolder: classes are the sorted top-level folders (hidden ones excluded)."""
    classes = sorted(entry.name for entry in os.scandir(root)
                     if entry.is_dir() and not entry.name.startswith("."))
    index = {name: number for number, name in enumerate(classes)}
    items: List[Tuple[str, int]] = []
    outside = 0
    used = set()
    for rel in images:
        top, sep, _ = rel.partition("/")
        if not sep or top not in index:
            outside += 1
            continue
        used.add(top)
        items.append((rel, index[top]))
    return items, classes, outside, [name for name in classes if name not in used]


def _items_from_labels_csv(root: str, labels_file: str, path_column: str, label_column: str,
                           images: set) -> Tuple[List[Tuple[str, int]], List[str], int]:
    """Rows of a labels CSV (path relative to root, label); classes are the sorted labels."""
    try:
        with open(labels_file, newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = reader.fieldnames or []
            for column in (path_column, label_column):
                if column not in header:
                    raise UsageError(f"{labels_file}: no column {column!r} (columns: {', '.join(header)})",
                                     path=labels_file)
            rows = [(row[path_column], row[label_column], reader.line_num) for row in reader]
    except OSError as exc:
        raise UsageError(f"{labels_file}: cannot read labels CSV ({exc.strerror})", path=labels_file) from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise SourceError(f"{labels_file}: not a readable UTF-8 CSV ({exc})", path=labels_file) from None
    names = {label for _, label, _ in rows if label is not None}
    classes = sorted(names, key=_class_sort_key(names))
    index = {name: number for number, name in enumerate(classes)}
    items: Dict[str, int] = {}
    for path, label, line in rows:
        if path is None or label is None or path == "" or label == "":
            raise SourceError(f"{labels_file}:{line}: empty path or label", path=labels_file)
        rel = os.path.normpath(path).replace(os.sep, "/")
        if rel.startswith("../") or os.path.isabs(rel):
            raise SourceError(f"{labels_file}:{line}: path {path!r} is outside SRC", path=labels_file)
        if rel in items:
            raise SourceError(f"{labels_file}:{line}: path {path!r} is listed twice", path=labels_file)
        items[rel] = index[label]
    ordered = sorted(items.items(), key=lambda item: _sort_key(item[0]))
    return ordered, classes, len(images - set(items))


def _class_sort_key(names: set) -> Optional[Any]:
    """Integer-looking class names sort numerically ("2" before "10"); others as strings."""
    try:
        for name in names:
            int(name)
    except ValueError:
        return None
    return int
