"""Tar and zip archives read as a tree of members, never unpacked to disk.

Listing reads the archive's own index once (a tar's headers, a zip's central directory) through a
Blob, local or remote. Members are then read by offset: an uncompressed tar's member is a byte
range of the archive, so is each member of a tar inside it (ImageNet's train tar of per-class
tars: `n01440764.tar` becomes the folder `n01440764/`); a zip member is its local header plus
its compressed bytes, inflated here to at most its declared size and checked against its CRC-32.
A compressed tar (.tar.gz, .tgz, .tar.bz2, .tar.xz) has no offsets to seek to: its members are
read in one pass of the stream, which a process continues across calls while the members asked
for lie ahead (see MemberReader). Member names and kinds pass archive_safety.py first."""
from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from ..errors import SampleError, SourceError
from .archive_safety import CountedStream, inflation_limit, safe_name, too_large
from .base import Skipped
from .blobs import STREAM_BLOCK, Blob, BlobStream
from ..remote.retry import Mismatch

#: Names SRC may have to be read as an archive (any case).
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tbz", ".tar.xz", ".txz", ".zip")
#: How a member's bytes are found: a range of the blob, a zip entry, or a place in a compressed stream.
TAR_RANGE, ZIP_STORED, ZIP_DEFLATED, STREAMED = -1, zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, -2
_OPENERS: Dict[str, Any] = {
    "gzip": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"), "bz2": bz2.BZ2File, "xz": lzma.LZMAFile}
_ZIP_HEADER = struct.Struct("<4sHHHHHIIIHH")
#: A zip member is read with its 30-byte local header, its name and up to 256 bytes of extra field.
ZIP_SLACK = 30 + 256


def is_archive_path(path: str) -> bool:
    """Whether a file name (or URL) is one of the archive kinds."""
    return path.lower().rstrip("/").endswith(ARCHIVE_SUFFIXES)


@dataclass
class Listing:
    """The regular members of an archive that may be read, in one list per field, and what was
    set aside: unsafe members (skipped inputs), folders (for class names)."""

    kind: str = "tar"                   # tar | gzip | bz2 | xz | zip
    rels: List[str] = field(default_factory=list)
    sizes: List[int] = field(default_factory=list)
    mtimes: List[int] = field(default_factory=list)     # ns since the epoch, as the archive records it
    originals: List[str] = field(default_factory=list)  # each member's name as the archive stores it
    places: List[Tuple[int, int, int, int]] = field(default_factory=list)  # (how, offset, stored size, crc)
    folders: Set[str] = field(default_factory=set)
    skipped: List[Skipped] = field(default_factory=list)
    seen: Dict[str, int] = field(default_factory=dict)   # rel -> position (a later copy replaces it)

    def add(self, rel: str, size: int, mtime_ns: int, place: Tuple[int, int, int, int], original: str) -> None:
        if rel in self.seen:        # as tar extracts: the last copy wins, the earlier one is reported
            self.skipped.append(Skipped(rel, "listed again later in the archive; the last copy is used"))
            position = self.seen[rel]
            self.sizes[position], self.mtimes[position], self.places[position] = size, mtime_ns, place
            self.originals[position] = original
            return
        self.seen[rel] = len(self.rels)
        self.rels.append(rel)
        self.sizes.append(size)
        self.mtimes.append(mtime_ns)
        self.places.append(place)
        self.originals.append(original)

    def sort(self) -> None:
        """Members sorted by path, component by component (as a local tree is walked)."""
        order = sorted(range(len(self.rels)), key=lambda position: self.rels[position].split("/"))
        for name in ("rels", "sizes", "mtimes", "places", "originals"):
            column = getattr(self, name)
            setattr(self, name, [column[position] for position in order])
        self.seen = {rel: position for position, rel in enumerate(self.rels)}
        self.skipped.sort(key=lambda item: item.path.split("/"))


def list_archive(blob: Blob) -> Listing:
    """The members of the archive in blob; SourceError naming it when it is no archive it can read."""
    head = blob.checked("", lambda: blob.read(0, min(blob.size, 512)))
    kind = _kind(head)
    listing = Listing(kind=kind)
    try:
        if kind == "zip":
            _list_zip(blob, listing)
        elif kind == "tar":
            _list_tar(blob, BlobStream(blob), 0, "", listing, nested=True)
        else:
            stream = inflated(blob, kind)
            tar = tarfile.open(fileobj=stream, mode="r|")
            for ordinal, info in enumerate(_members(tar)):
                _take(listing, info, (STREAMED, ordinal, info.size, -1), "")
            while stream.read(STREAM_BLOCK):     # to the end, where gzip, bz2 and xz check their CRC
                pass
    except (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError, lzma.LZMAError, SampleError) as exc:
        if isinstance(exc, SourceError) and not isinstance(exc, SampleError):
            raise
        raise SourceError(f"cannot read as a {kind} archive ({exc})", path=blob.shown) from None
    listing.sort()
    return listing


def _kind(head: bytes) -> str:
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh"):
        return "bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    return "tar"


def inflated(blob: Blob, kind: str) -> CountedStream:
    """The decompressed stream of a compressed archive, bounded by inflation_limit."""
    return CountedStream(_OPENERS[kind](BlobStream(blob)), inflation_limit(blob.size), blob.shown)


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The headers of tar one by one, without tarfile keeping them all."""
    while True:
        info = tar.next()
        if info is None:
            return
        setattr(tar, "members", [])     # tarfile keeps every header it read; a listing needs none of them
        yield info


def _list_tar(blob: Blob, stream: BlobStream, base: int, prefix: str, listing: Listing, nested: bool) -> None:
    """The members of the tar at [base, base + stream.size) of blob; a regular member named *.tar
    is listed as the folder of its own members (one level deep)."""
    tar = tarfile.open(fileobj=stream, mode="r:")
    for info in _members(tar):
        start = base + info.offset_data
        if nested and info.isreg() and info.name.lower().endswith(".tar") and not info.sparse:
            rel, why = safe_name(info.name[:-4])
            if rel is not None:
                listing.folders.add(prefix + rel)
                _list_tar(blob, BlobStream(blob, start, info.size), start, prefix + rel + "/", listing, False)
                continue
        _take(listing, info, (TAR_RANGE, start, info.size, -1), prefix)
    _check_end(tar, stream, prefix)


def _check_end(tar: tarfile.TarFile, stream: BlobStream, prefix: str) -> None:
    """tarfile ends its listing quietly at a header whose checksum fails: unless the listing
    stopped at the archive's end (zero blocks, or no bytes left), the archive is damaged."""
    stream.seek(tar.offset)
    block = stream.read(tarfile.BLOCKSIZE)
    if block.strip(b"\0"):
        where = f" (in {prefix.rstrip('/')}.tar)" if prefix else ""
        raise SourceError(f"damaged tar header at byte {tar.offset}{where}: its checksum does not match; "
                          "the archive was altered or truncated", path=stream.blob.shown)


def _take(listing: Listing, info: tarfile.TarInfo, place: Tuple[int, int, int, int], prefix: str) -> None:
    """List one tar header: a regular file, a folder, or a skipped input saying why."""
    rel, why = safe_name(info.name)
    shown = prefix + (rel or info.name)
    if rel is None:
        if why:
            listing.skipped.append(Skipped(shown, why))
        return
    if info.isdir():
        listing.folders.add(prefix + rel)
        return
    why = _tar_kind_problem(info) or too_large(info.size)
    if why:
        listing.skipped.append(Skipped(shown, why))
        return
    listing.add(prefix + rel, info.size, int(round(float(info.mtime) * 1e9)), place, info.name)


def _tar_kind_problem(info: tarfile.TarInfo) -> str:
    if info.issym() or info.islnk():
        kind = "symbolic" if info.issym() else "hard"
        return f"{kind} link in the archive (to {info.linkname!r}); not followed"
    if info.ischr() or info.isblk():
        return "device file in the archive; not read"
    if info.isfifo():
        return "FIFO in the archive; not read"
    if info.sparse is not None or not info.isreg():
        return "not a regular file in the archive (a sparse or special member); not read"
    return ""


def _list_zip(blob: Blob, listing: Listing) -> None:
    with zipfile.ZipFile(BlobStream(blob)) as archive:
        for info in archive.infolist():
            rel, why = safe_name(info.filename)
            if rel is None:
                if why:
                    listing.skipped.append(Skipped(info.filename, why))
                continue
            if info.is_dir():
                listing.folders.add(rel)
                continue
            why = _zip_problem(info, blob.size) or too_large(info.file_size)
            if why:
                listing.skipped.append(Skipped(rel, why))
                continue
            mtime = _zip_mtime(info)
            listing.add(rel, info.file_size, mtime,
                        (info.compress_type, info.header_offset, info.compress_size, info.CRC), info.orig_filename)


def _zip_problem(info: zipfile.ZipInfo, archive_size: int) -> str:
    mode = info.external_attr >> 16
    kind = mode & 0o170000
    if kind == 0o120000:
        return "symbolic link in the archive; not followed"
    if kind not in (0, 0o100000):
        return "not a regular file in the archive (a device, FIFO or socket); not read"
    if info.flag_bits & 0x1:
        return "encrypted member; not read"
    if info.compress_type not in (ZIP_STORED, ZIP_DEFLATED):
        return f"compression method {info.compress_type} (only stored and deflated members are read)"
    if info.header_offset + info.compress_size > archive_size:
        return "its compressed bytes end past the end of the archive; not read"
    return ""


def _zip_mtime(info: zipfile.ZipInfo) -> int:
    """The member's time as ns since the epoch: the extended timestamp (UTC) where present, else
    the DOS time read as local time, as unzip does."""
    extra = info.extra
    while len(extra) >= 4:
        tag, length = struct.unpack("<HH", extra[:4])
        if tag == 0x5455 and length >= 5 and extra[4] & 1:
            return struct.unpack("<I", extra[5:9])[0] * 1_000_000_000
        extra = extra[4 + length:]
    import time
    return int(time.mktime(info.date_time + (0, 0, -1))) * 1_000_000_000


def read_zip_member(blob: Blob, name: str, size: int, place: Tuple[int, int, int, int]) -> bytes:
    """A zip member's bytes: its local header checked against the central directory (same name),
    inflated to at most size bytes, its CRC-32 checked; Mismatch when anything differs."""
    method, offset, stored, crc = place
    guess = ZIP_SLACK + len(name.encode("utf-8"))
    data = blob.read(offset, min(guess + stored, blob.size - offset))
    fields = _ZIP_HEADER.unpack_from(data)
    if fields[0] != b"PK\x03\x04":
        raise Mismatch("no local file header where the central directory says (altered or damaged)")
    name_length, extra_length = fields[9], fields[10]
    start = 30 + name_length + extra_length
    raw_name = data[30:30 + name_length]
    if raw_name.decode("utf-8" if fields[2] & 0x800 else "cp437", "replace") != name:
        raise Mismatch("its local header names another file than the central directory")
    body = data[start:start + stored]
    if len(body) < stored:
        body += blob.read(offset + len(data), stored - len(body)) if start <= len(data) else \
            blob.read(offset + start, stored)
    if method == ZIP_STORED:
        out = body
    else:
        inflater = zlib.decompressobj(-15)
        try:
            out = inflater.decompress(body, size + 1)
        except zlib.error as exc:
            raise Mismatch(f"its deflated bytes do not inflate ({exc})") from None
    if len(out) != size:
        raise Mismatch(f"inflates to {'more' if len(out) > size else 'fewer'} bytes than the {size} it declares")
    if zlib.crc32(out) != crc:
        raise Mismatch("its CRC-32 differs from the archive's (altered on the way, or damaged)")
    return bytes(out)


class MemberReader:
    """Reads members of one listed archive. Range and zip members are read where they lie; members
    of a compressed tar come from a pass over its stream that this process keeps open between
    calls while the members asked for lie ahead of it (so shards read in archive order cost one
    pass in all). Picklable: the open stream stays in the process that opened it."""

    def __init__(self, blob: Blob, kind: str) -> None:
        self.blob, self.kind = blob, kind
        self._cursor: Optional[Tuple[Any, Iterator[tarfile.TarInfo], int]] = None   # (tar, members, next ordinal)

    def __getstate__(self) -> Dict[str, Any]:
        return {"blob": self.blob, "kind": self.kind, "_cursor": None}

    def read(self, original: str, size: int, place: Tuple[int, int, int, int], blob: Optional[Blob] = None) -> bytes:
        """One member's bytes (not a streamed one), from blob (a Window of the archive) or the
        archive; Mismatch when they are not what the archive says."""
        if place[0] == TAR_RANGE:
            return (blob or self.blob).read(place[1], size)
        return read_zip_member(blob or self.blob, original, size, place)

    def streamed(self, wanted: List[Tuple[int, int]]) -> Iterator[Tuple[int, bytes]]:
        """(key, bytes) for each (ordinal, key) of wanted, in ordinal order, from one pass of the stream."""
        for ordinal, key in sorted(wanted):
            if self._cursor is None or self._cursor[2] > ordinal:
                self._open_stream()
            assert self._cursor is not None
            tar, members, position = self._cursor
            for info in members:
                position += 1
                if position - 1 == ordinal:
                    handle = tar.extractfile(info)
                    data = handle.read(info.size) if handle is not None else b""
                    self._cursor = (tar, members, position)
                    if len(data) != info.size:
                        raise SourceError("the compressed stream ends inside a member (truncated)",
                                          path=self.blob.shown)
                    yield key, data
                    break
            else:
                self._cursor = None
                raise SourceError("holds fewer members than when it was listed (changed since the scan)",
                                  path=self.blob.shown)

    def _open_stream(self) -> None:
        tar = tarfile.open(fileobj=inflated(self.blob, self.kind), mode="r|")
        self._cursor = (tar, _members(tar), 0)


def extent(original: str, size: int, place: Tuple[int, int, int, int], archive_size: int) -> Tuple[int, int]:
    """The bytes [first, last) of the archive that reading a (not streamed) member touches."""
    how, offset, stored, _ = place
    if how == TAR_RANGE:
        return offset, offset + size
    return offset, min(archive_size, offset + ZIP_SLACK + len(original.encode("utf-8")) + stored)


__all__ = ["ARCHIVE_SUFFIXES", "Listing", "MemberReader", "STREAMED", "extent", "is_archive_path", "list_archive"]
