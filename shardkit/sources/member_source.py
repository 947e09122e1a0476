"""An image tree that is not a local folder: the objects below a URL, or the members of a tar or
zip archive (local or at a URL). The same labels (folders, a labels CSV, none), codecs and
fingerprint as a local tree (image_tree.py), so the same files with the same times convert to
the same bytes wherever they lie; the files are read through member_trees.py."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..codecs.image import ImageCodec, make_image_codec
from ..codecs.pillow import image_extensions
from ..options import ImageOptions, RunOptions
from .archives import STREAMED
from .base import Outcome, Skipped, Source
from .image_tree import RUN_IMAGES, encode_images, folder_hint, labeled_items, tree_fingerprint
from .member_trees import MemberTree, Read, open_tree
from .tree import extension_counts, has_extension


class MemberTreeSource(Source):
    """Image files of a MemberTree, each one sample (see module doc)."""

    kind = "image_tree"
    options_class = ImageOptions

    def __init__(self, tree: MemberTree, positions: List[int], labels: List[int], classes: List[str],
                 codec: ImageCodec, labeled: bool, summary: Dict[str, Any], skipped: List[Skipped],
                 in_flight: int) -> None:
        self.tree = tree
        listing = tree.listing
        self.positions = np.asarray(positions, dtype=np.int64)      # item -> position in the listing
        self.paths = [listing.rels[position] for position in positions]
        self.sizes = np.asarray([listing.sizes[position] for position in positions], dtype=np.int64)
        self.mtimes = np.asarray([listing.mtimes[position] for position in positions], dtype=np.int64)
        self.labels = np.asarray(labels, dtype=np.int64)
        self.classes, self.codec = classes, codec
        self.schema = codec.schema(labeled)
        self._summary, self._skipped, self.in_flight = summary, skipped, in_flight

    @classmethod
    def claims(cls, src: str, source_options: Dict[str, Any]) -> bool:
        return True         # open_source hands it only URLs and archives (see sources/__init__.py)

    @classmethod
    def open(cls, src: str, options: ImageOptions, run: RunOptions) -> "MemberTreeSource":
        return cls.of_tree(open_tree(src, run.storage_options), options, run)

    @classmethod
    def of_tree(cls, tree: MemberTree, options: ImageOptions, run: RunOptions) -> "MemberTreeSource":
        """The image items of a listed tree, labelled by the options."""
        listing = tree.listing
        extensions = image_extensions()
        images = [rel for rel in listing.rels if has_extension(rel, extensions)]
        others = [rel for rel in listing.rels if not has_extension(rel, extensions)]
        summary: Dict[str, Any] = {"files_seen": len(listing.rels), "image_files": len(images),
                                   "other_files": len(others), "other_files_by_extension": extension_counts(others),
                                   "members_not_read": len(listing.skipped)}
        folders = {rel.split("/", 1)[0] for rel in listing.rels if "/" in rel} | \
            {folder.split("/", 1)[0] for folder in listing.folders}
        items, classes, bad_rows = labeled_items(tree.shown, options, images, lambda: folders, summary)
        where = {rel: position for position, rel in enumerate(listing.rels)}
        known = [(rel, label) for rel, label in items if rel in where]
        missing = [Skipped(rel, "no such file in SRC") for rel, _ in items if rel not in where]
        codec = make_image_codec(**options.codec_options())
        return cls(tree, [where[rel] for rel, _ in known], [label for _, label in known], classes, codec,
                   labeled=not options.no_labels, summary=summary,
                   skipped=bad_rows + sorted(listing.skipped + missing, key=lambda item: item.path.split("/")),
                   in_flight=run.in_flight)

    def rename_skipped(self, folder: str, shown: str) -> None:
        """Name the skipped rows of a labels CSV read from a temporary copy by the URL it came from."""
        from .staged_tables import renamed_skip
        self._skipped = [renamed_skip(item, folder, shown) for item in self._skipped]

    def item_sizes(self) -> np.ndarray:
        keys = np.fromiter((len(rel.encode("utf-8", "surrogateescape")) for rel in self.paths), dtype=np.int64,
                           count=len(self.paths))
        return self.codec.stored_bytes(self.sizes) + keys + 4

    def summary(self) -> Dict[str, Any]:
        return dict(self._summary)

    def plan_skipped(self) -> List[Skipped]:
        return list(self._skipped)

    def empty_hint(self) -> str:
        return folder_hint(self._summary)

    def fingerprint(self) -> str:
        return tree_fingerprint(self, self.paths, self.labels, self.sizes, self.mtimes)

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        return self.encode_items(np.arange(start, stop, dtype=np.int64))

    def encode_items(self, items: np.ndarray) -> Iterator[Outcome]:
        """The items read in batches of RUN_IMAGES (a compressed archive's: all at once, in one pass
        of its stream), the next batch fetched while this one is encoded."""
        items = np.asarray(items, dtype=np.int64)
        streamed = len(items) and self.tree.listing.places[int(self.positions[items[0]])][0] == STREAMED
        step = len(items) if streamed else RUN_IMAGES
        batches = [items[start:start + step] for start in range(0, len(items), step)]
        return encode_images(self.codec, self._reads(batches))

    def _reads(self, batches: List[np.ndarray]) -> Iterator[Tuple[str, int, Read]]:
        with ThreadPoolExecutor(1, thread_name_prefix="shardkit-source") as pool:
            ahead: Optional[Any] = None
            for number, batch in enumerate(batches):
                datas = ahead.result() if ahead is not None else self._read(batch)
                ahead = pool.submit(self._read, batches[number + 1]) if number + 1 < len(batches) else None
                for item, label, data in zip(batch.tolist(), self.labels[batch].tolist(), datas):
                    yield self.paths[item], label, data

    def _read(self, batch: np.ndarray) -> List[Read]:
        return self.tree.read_many(self.positions[batch].tolist(), self.in_flight)


__all__ = ["MemberTreeSource"]
