"""Trees that are not a local folder: the objects below a URL, or the members of an archive.

A tree lists its files once (relative POSIX paths, sorted component by component, each with its
size and modification time) and reads a batch of them: remotely with a bounded number of
requests in flight (remote/transfer.run_bounded), each retried with back-off (remote/retry.py).
What is read is checked against the listing: the size always; an S3 object's MD5 where its ETag
is one (an object altered on the way or replaced since the listing is fetched again, then
refused); a zip member's CRC-32. A local archive's damaged member is one skipped input; a remote
read that keeps failing stops the conversion with one line naming the URL."""
from __future__ import annotations

import hashlib
import re
from typing import Any, Callable, List, Mapping, Optional, Tuple, Union

from ..errors import SampleError, UsageError
from ..remote.location import RemoteLocation
from ..remote.retry import Mismatch, retried
from ..remote.transfer import run_bounded
from .archive_safety import safe_name, too_large
from .archives import STREAMED, Listing, MemberReader, extent, list_archive
from .base import Skipped
from .blobs import Blob, Window, open_blob

#: An ETag that is the object's MD5 (S3 and compatible stores, for objects not uploaded in parts).
MD5_ETAG = re.compile(r'"?([0-9a-f]{32})"?\Z')
#: Archive members closer than this are read with one request (the gap is read and dropped) ...
SPAN_GAP = 1 << 20
#: ... up to this many bytes per request.
SPAN_BYTES = 16 << 20
#: What reading one item gives: its bytes, or why it cannot become a sample.
Read = Union[bytes, SampleError]


class MemberTree:
    """The listing of a tree and how to read its items; picklable (worker processes read too)."""

    listing: Listing
    shown: str

    def read_many(self, items: List[int], in_flight: int) -> List[Read]:
        """The bytes of each listed item (positions in the listing), in that order."""
        raise NotImplementedError

    def name(self, rel: str) -> str:
        """How messages name one of its files."""
        return f"{self.shown.rstrip('/')}/{rel}"


class ArchiveTree(MemberTree):
    """The members of a tar or zip archive (local or remote)."""

    def __init__(self, blob: Blob) -> None:
        self.blob, self.shown = blob, blob.shown
        self.listing = list_archive(blob)
        self.reader = MemberReader(blob, self.listing.kind)

    def name(self, rel: str) -> str:
        return f"{self.shown}:{rel}"

    def read_many(self, items: List[int], in_flight: int) -> List[Read]:
        listing = self.listing
        streamed = [(listing.places[item][1], position) for position, item in enumerate(items)
                    if listing.places[item][0] == STREAMED]
        if streamed:
            out: List[Read] = [b""] * len(items)
            for position, data in self.reader.streamed(streamed):
                out[position] = data
            return out

        def one(item: int) -> Read:
            rel = listing.rels[item]
            try:
                return self.blob.checked(rel, lambda: self.reader.read(
                    listing.originals[item], listing.sizes[item], listing.places[item]))
            except SampleError as exc:
                return exc
        if not self.blob.remote:
            return [one(item) for item in items]
        out = [b""] * len(items)

        def span(group: List[int]) -> None:
            """One ranged GET for members lying close together; a member whose bytes from it
            are wrong is fetched again on its own (retried)."""
            bounds = [self._extent(items[position]) for position in group]
            first, last = min(bound[0] for bound in bounds), max(bound[1] for bound in bounds)
            window = Window(self.blob, first, self.blob.checked("", lambda: self.blob.read(first, last - first)))
            for position in group:
                item = items[position]
                try:
                    out[position] = self.reader.read(listing.originals[item], listing.sizes[item],
                                                     listing.places[item], window)
                except (Mismatch, SampleError):
                    out[position] = one(item)
        run_bounded(span, self._spans(items), in_flight)
        return out

    def _extent(self, item: int) -> Tuple[int, int]:
        listing = self.listing
        return extent(listing.originals[item], listing.sizes[item], listing.places[item], self.blob.size)

    def _spans(self, items: List[int]) -> List[List[int]]:
        """Positions of items grouped into runs of the archive read by one request each: members
        less than SPAN_GAP apart, at most SPAN_BYTES in all (a single larger member alone)."""
        groups: List[List[int]] = []
        start = end = -1
        for position in sorted(range(len(items)), key=lambda position: self._extent(items[position])):
            first, last = self._extent(items[position])
            if groups and first - end <= SPAN_GAP and last - start <= SPAN_BYTES:
                groups[-1].append(position)
                end = max(end, last)
            else:
                groups.append([position])
                start, end = first, last
        return groups


class FolderTree(MemberTree):
    """The objects below a URL (a bucket prefix, an HTTP folder with an index page)."""

    def __init__(self, location: RemoteLocation, found: Mapping[str, Mapping[str, Any]]) -> None:
        self.location, self.shown = location, location.shown
        self.listing = Listing(kind="folder")
        self.md5s: List[str] = []
        root = location.root.rstrip("/") + "/"
        for path in sorted(found, key=lambda path: path.split("/")):
            info = found[path]
            if info.get("type") == "directory" or not path.startswith(root) or path.endswith("/"):
                continue
            rel, why = safe_name(path[len(root):])
            size = int(info.get("size") or 0)
            why = why or too_large(size)
            if rel is None or why:
                self.listing.skipped.append(Skipped(path[len(root):], why or "an empty name"))
                continue
            if "/" in rel:
                self.listing.folders.add(rel.split("/", 1)[0])
            self.listing.add(rel, size, modified_ns(info), (0, 0, size, -1), rel)
            self.md5s.append(_md5_of(info))
        self.listing.skipped.sort(key=lambda item: item.path.split("/"))

    def read_many(self, items: List[int], in_flight: int) -> List[Read]:
        """One batched request per object first (fsspec's own concurrent cat, in_flight at once:
        far fewer threads and round trips than one call each); an object it did not bring, or
        brought wrong, is fetched again on its own, retried (remote/retry.py)."""
        paths = [self.location.path(self.listing.rels[item]) for item in items]
        try:
            got = self.location.fs.cat(paths, on_error="return", batch_size=in_flight) if len(paths) > 1 else {}
        except Exception:       # the whole batch failed: each object is tried on its own below
            got = {}
        out: List[Read] = []
        for item, path in zip(items, paths):
            data = got.get(path)
            try:
                out.append(self._checked(item, bytes(data)) if isinstance(data, (bytes, bytearray))
                           else self._fetch(item))
            except Mismatch:
                out.append(self._fetch(item))
        return out

    def _fetch(self, item: int) -> bytes:
        rel, size = self.listing.rels[item], self.listing.sizes[item]

        def fetch() -> bytes:
            path = self.location.path(rel)
            return self._checked(item, self.location.fs.cat_file(path, start=0, end=size + 1) if size else
                                 self.location.fs.cat_file(path))
        return retried(self.location, rel, "fetch", fetch)

    def _checked(self, item: int, data: bytes) -> bytes:
        """data, once its size (and MD5, where the listing's ETag is one) match the listing; else Mismatch."""
        size, md5 = self.listing.sizes[item], self.md5s[item]
        if len(data) != size:
            raise Mismatch(f"received {len(data)} bytes, the listing says {size}")
        if md5 and hashlib.md5(data).hexdigest() != md5:
            raise Mismatch("its MD5 differs from the ETag the listing gave (altered on the way, or "
                           "replaced since the listing)")
        return bytes(data)


def modified_ns(info: Mapping[str, Any]) -> int:
    """An object's modification time as ns since the epoch, from the fields the stores give
    (S3: LastModified, GCS: updated, HTTP and local: mtime); 0 when none. A date is cut to its
    whole second, whether the store gives it as text or as a datetime, so both give one time."""
    for key in ("LastModified", "updated", "mtime", "last_modified", "Last-Modified"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp()) * 1_000_000_000
        try:
            return int(round(float(value) * 1e9))
        except (TypeError, ValueError):
            pass
        seconds = _seconds(str(value))
        if seconds is not None:
            return seconds * 1_000_000_000
    return 0


def _seconds(text: str) -> Optional[int]:
    """Whole seconds since the epoch of an HTTP date ("Tue, 14 Nov 2023 22:13:20 GMT") or an
    ISO 8601 time ("2023-11-14T22:13:20.000Z", GCS), None for anything else."""
    import datetime
    import email.utils
    for parse in (email.utils.parsedate_to_datetime, lambda text: datetime.datetime.fromisoformat(
            text.replace("Z", "+00:00"))):
        try:
            return int(parse(text).timestamp())
        except (TypeError, ValueError):
            continue
    return None


def _md5_of(info: Mapping[str, Any]) -> str:
    etag = info.get("ETag") or info.get("etag") or ""
    match = MD5_ETAG.match(str(etag))
    return match.group(1) if match else ""


def open_tree(src: str, storage_options: Optional[Mapping[str, Any]] = None) -> MemberTree:
    """The tree at src: an archive (local or at a URL) or the objects below a URL."""
    from .archives import is_archive_path
    if is_archive_path(src):
        return ArchiveTree(open_blob(src, storage_options))
    location = RemoteLocation(src, storage_options)
    found = list_objects(location)
    return FolderTree(location, found)


def list_objects(location: RemoteLocation) -> Mapping[str, Mapping[str, Any]]:
    """Every object below the location (path -> info), retried; UsageError when there is none."""
    call: Callable[[], Any] = lambda: location.fs.find(location.root, detail=True)   # noqa: E731
    found = dict(retried(location, "", "list", call))
    if not found:
        raise UsageError("no object below this URL", path=location.shown)
    unsized = [path for path, info in found.items() if info.get("size") is None and info.get("type") != "directory"]
    root = location.root.rstrip("/") + "/"

    def look_up(path: str) -> None:         # an index page gives names only: ask each object (HEAD)
        found[path] = {**found[path], **retried(location, path[len(root):], "look up", lambda: location.fs.info(path))}
    run_bounded(look_up, unsized, 16)
    return found


__all__ = ["ArchiveTree", "FolderTree", "MemberTree", "modified_ns", "open_tree"]
