"""Image trees: ImageFolder layout, a tree plus a labels CSV, or an unlabeled tree."""
from __future__ import annotations

import errno
import hashlib
import os
import zlib
from stat import S_ISLNK, S_ISREG
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple, Union

import numpy as np

from ..codecs.image import ImageCodec, make_image_codec

from ..codecs.pillow import image_extensions
from ..errors import SampleError, SourceError
from ..options import ImageOptions, RunOptions
from ..records import EncodedRows, Payload, payload_crc32
from .base import ConvertedRun, Outcome, Skipped, Source
from .labels_csv import read_labels_csv
from .tree import LinkOut, extension_counts, file_kind, has_extension, read_inside, walk_files


class ImageTreeSource(Source):
    """Image files below a folder, each one sample; labels from folders, a CSV, or none."""

    kind = "image_tree"
    options_class = ImageOptions

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
        self._stats = stats        # (size, mtime_ns, st_dev, st_ino, 1 if a link into SRC) per item
        self.real_root = os.path.realpath(root)

    # ---- scanning -------------------------------------------------------------------
    @classmethod
    def claims(cls, src: str, source_options: Dict[str, Any]) -> bool:
        return os.path.isdir(src)

    @classmethod
    def open(cls, src: str, options: ImageOptions, run: RunOptions) -> "ImageTreeSource":
        """Find the items of src according to the label options."""
        root = src
        codec = make_image_codec(**options.codec_options())
        extensions = image_extensions()
        links_out: List[LinkOut] = []
        all_files = list(walk_files(root, links_out))
        images = [rel for rel in all_files if has_extension(rel, extensions)]
        summary: Dict[str, Any] = {"files_seen": len(all_files), "image_files": len(images),
                                   "other_files": len(all_files) - len(images),
                                   "other_files_by_extension": extension_counts(
                                       rel for rel in all_files if not has_extension(rel, extensions)),
                                   "links_outside_src": len(links_out)}
        outside = {link.path for link in links_out}
        items, classes, bad_rows = labeled_items(root, options, images, lambda: [
            entry.name for entry in os.scandir(root) if entry.is_dir() and entry.name not in outside], summary)
        listed = [] if options.labels else _listed_links(links_out, extensions)
        paths, labels, stats, failures = _stat_items(root, items, set(images), links_out)
        skipped = bad_rows + sorted(listed + failures, key=lambda item: item.path.split("/"))
        return cls(root, paths, np.asarray(labels, dtype=np.int64), classes, codec,
                   labeled=not options.no_labels, summary=summary, skipped=skipped,
                   stats=np.asarray(stats, dtype=np.int64).reshape(-1, 5))

    # ---- Source interface -------------------------------------------------------------
    def item_sizes(self) -> np.ndarray:
        keys = np.fromiter((len(rel.encode("utf-8", "surrogateescape")) for rel in self.paths), dtype=np.int64,
                           count=len(self.paths))
        return self.codec.stored_bytes(self._stats[:, 0]) + keys + 4     # + the key and its length

    def summary(self) -> Dict[str, Any]:
        return dict(self._summary)

    def empty_hint(self) -> str:
        return folder_hint(self._summary)

    def plan_skipped(self) -> List[Skipped]:
        return list(self._skipped)

    def fingerprint(self) -> str:
        return tree_fingerprint(self, self.paths, self.labels, self._stats[:, 0], self._stats[:, 1])

    def item_keys(self) -> Optional[List[str]]:
        return list(self.paths)

    def restrict(self, items: np.ndarray, classes: List[str]) -> None:
        number = {name: index for index, name in enumerate(classes)}
        renumber = np.array([number[name] for name in self.classes] + [-1], dtype=np.int64)  # -1 stays -1
        items = np.asarray(items, dtype=np.int64)
        self.paths = [self.paths[item] for item in items.tolist()]
        self.labels = renumber[self.labels[items]]
        self._stats = self._stats[items]
        self.classes = list(classes)

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        return self.encode_items(np.arange(start, stop, dtype=np.int64))

    def encode_items(self, items: np.ndarray) -> Iterator[Outcome]:
        """Each image file is read on its own, so any order costs the same (see encode_images)."""
        items = np.asarray(items, dtype=np.int64)
        prefix = os.path.join(self.root, "")           # one join per call, not per image
        paths, real_root = self.paths, self.real_root

        def reads() -> Iterator[Tuple[str, int, Union[bytes, SampleError]]]:
            for index, label, (dev, ino, link) in zip(items.tolist(), self.labels[items].tolist(),
                                                      self._stats[items, 2:].tolist()):
                rel = paths[index]
                try:
                    yield rel, label, read_inside(real_root, prefix + rel, (dev, ino), bool(link))
                except OSError as exc:
                    yield rel, label, SampleError(f"cannot read ({exc.strerror or exc})")
                except SampleError as exc:
                    yield rel, label, exc
        return encode_images(self.codec, reads())


def folder_hint(summary: Dict[str, Any]) -> str:
    """What to do when an image tree gave no item because its images lie outside class folders."""
    if summary.get("files_outside_class_folders"):
        return ("; the images are not in class folders (SRC/<class>/...): pass --no-labels for unlabeled "
                "samples, or --labels FILE to take labels from a CSV")
    return ""


def encode_images(codec: ImageCodec, reads: Iterable[Tuple[str, int, Union[bytes, SampleError]]]) -> Iterator[Outcome]:
    """Outcomes of (key, label, the file's bytes or why it could not be read), in order. The samples
    go to the sink in runs (ConvertedRun of EncodedRows) of at most RUN_IMAGES images and about
    RUN_BYTES payload bytes: no Python object or sink step per image, and bounded memory for large ones."""
    encode = codec.encode
    crc = payload_crc32 if codec.mode == "raw" else zlib.crc32
    run = _Run()
    for rel, label, data in reads:
        if isinstance(data, SampleError):
            yield Skipped(rel, str(data))
            continue
        try:
            payload, detected = encode(data)
        except OSError as exc:
            yield Skipped(rel, f"cannot read ({exc.strerror or exc})")
            continue
        except SampleError as exc:
            yield Skipped(rel, str(exc))
            continue
        run.add(payload, label, crc(payload), rel, detected, len(data))
        if len(run.keys) >= RUN_IMAGES or run.payload_bytes >= RUN_BYTES:
            yield run.outcome()
            run = _Run()
    if run.keys:
        yield run.outcome()


def tree_fingerprint(source: Source, rels: List[str], labels: np.ndarray, sizes: Iterable[int],
                     mtimes: Iterable[int]) -> str:
    """The fingerprint of an image tree: kind, schema, classes, and each item's path, label, size
    and modification time (ns), wherever the tree lies, so that the same files with the same times
    give the same dataset from a folder, an archive or a bucket."""
    digest = hashlib.sha256()
    digest.update(repr((source.kind, source.schema.to_dict(), source.classes)).encode())
    for rel, label, size, mtime in zip(rels, np.asarray(labels).tolist(), np.asarray(sizes).tolist(),
                                       np.asarray(mtimes).tolist()):
        digest.update(f"{rel}\0{label}\0{size}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


#: Most images in one run handed to the sink, and the payload bytes after which a run ends early.
RUN_IMAGES = 256
RUN_BYTES = 8 << 20


class _Run:
    """The columns of the samples of one run, filled image by image."""

    def __init__(self) -> None:
        self.payloads: List[Payload] = []
        self.labels: List[int] = []
        self.crcs: List[int] = []
        self.keys: List[str] = []
        self.tags: List[str] = []
        self.source_bytes = self.payload_bytes = 0

    def add(self, payload: Payload, label: int, crc: int, key: str, tag: str, source_bytes: int) -> None:
        self.payloads.append(payload)
        self.labels.append(label)
        self.crcs.append(crc)
        self.keys.append(key)
        self.tags.append(tag)
        self.source_bytes += source_bytes
        self.payload_bytes += payload.nbytes if isinstance(payload, np.ndarray) else len(payload)

    def outcome(self) -> ConvertedRun:
        """The run as one outcome (raw arrays stacked into one block)."""
        payloads: Any = self.payloads
        if payloads and isinstance(payloads[0], np.ndarray):
            payloads = np.stack(payloads)
        return ConvertedRun(EncodedRows(payloads, self.labels, self.crcs, self.keys), self.source_bytes, self.tags)


def _stat_items(root: str, items: List[Tuple[str, int]], walked: Set[str], links_out: List[LinkOut]) \
        -> Tuple[List[str], List[int], List[Tuple[int, int, int, int, int]], List[Skipped]]:
    """(paths, labels, (size, mtime_ns, st_dev, st_ino, whether a link) of each, Skipped ones) of the items whose
    file is a regular file now; an item the walk did not find that lies behind a link out of SRC
    (a labels CSV may name any path) is skipped unread."""
    paths: List[str] = []
    labels: List[int] = []
    stats: List[Tuple[int, int, int, int, int]] = []
    skipped: List[Skipped] = []
    prefix = os.path.join(root, "")
    for rel, label in items:
        link = None if rel in walked else _behind_link(rel, links_out)
        if link is not None:
            skipped.append(Skipped(rel, link.reason() if link.path == rel else f"lies in {link.path!r}, a "
                                   + link.reason()))
            continue
        try:
            stat = os.lstat(prefix + rel)
            is_link = S_ISLNK(stat.st_mode)
            if is_link:                 # a link into SRC (the walk checked it): the file it leads to
                stat = os.stat(prefix + rel)
        except OSError as exc:
            skipped.append(Skipped(rel, _stat_failure(os.path.join(root, rel), exc)))
            continue
        if not S_ISREG(stat.st_mode):
            skipped.append(Skipped(rel, f"not a regular file ({file_kind(stat.st_mode)})"))
            continue
        paths.append(rel)
        labels.append(label)
        stats.append((stat.st_size, stat.st_mtime_ns, stat.st_dev, stat.st_ino, int(is_link)))
    return paths, labels, stats, skipped


def _behind_link(rel: str, links_out: List[LinkOut]) -> "LinkOut | None":
    """The link out of SRC that rel is, or lies below."""
    for link in links_out:
        if rel == link.path or (link.folder and rel.startswith(link.path + "/")):
            return link
    return None


def _listed_links(links_out: List[LinkOut], extensions: FrozenSet[str]) -> List[Skipped]:
    """The links out of SRC reported as skipped inputs: every link to a folder and every
    image-named one (a link to some other file would be ignored anyway)."""
    return [Skipped(link.path, link.reason()) for link in links_out
            if link.folder or has_extension(link.path, extensions)]


def _stat_failure(path: str, exc: OSError) -> str:
    """Why an item cannot be used, in words (broken link, link loop, permission, ...)."""
    if exc.errno == errno.ELOOP:
        return "symbolic link loop (the link points back to itself)"
    if os.path.islink(path):
        return f"broken symbolic link (its target {os.readlink(path)!r} does not exist)"
    return f"cannot stat ({exc.strerror or exc})"


def labeled_items(root: str, options: ImageOptions, images: List[str], folders: Callable[[], Iterable[str]],
                  summary: Dict[str, Any]) -> Tuple[List[Tuple[str, int]], List[str], List[Skipped]]:
    """(items (path, label), classes, skipped rows of a labels CSV) by the label options: none,
    a labels CSV, or the top-level folders (folders() lists their names); summary gains the counts."""
    if options.no_labels:
        return [(rel, -1) for rel in images], [], []
    if options.labels:
        items, classes, ignored, bad_rows = read_labels_csv(
            root, options.labels, options.path_column, options.label_column, options.delimiter, set(images))
        summary["unlisted_images_ignored"] = ignored
        summary["label_rows_skipped"] = len(bad_rows)
        return items, classes, bad_rows
    items, classes, outside, empty = items_by_folder(root, folders(), images)
    summary["files_outside_class_folders"] = outside
    summary["empty_classes"] = empty
    return items, classes, []


def items_by_folder(root: str, folders: Iterable[str],
                    images: List[str]) -> Tuple[List[Tuple[str, int]], List[str], int, List[str]]:
    """(items (path, label), classes, images outside any class folder, classes without an image):
    classes are the sorted names of the top-level folders given, hidden ones left out."""
    classes = sorted(name for name in folders if not name.startswith("."))
    for name in classes:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(name).decode("ascii", "backslashreplace")
            raise SourceError("class folder name is not UTF-8; class names are stored as text, so rename "
                              "the folder (e.g. convmv -f latin1 -t utf8)", path=os.path.join(root, raw)) from None
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
