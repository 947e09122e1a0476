"""The one checked way to open a shard and read its samples, for the dataset, verify and re-sharding.

Opening checks the file against what the manifest says of it (a regular file inside the dataset,
its size, the dataset identity it carries, its sample count, and its labels and CRC32s against the
dataset's sample table) and turns whatever a format's library raises on a damaged file into
CorruptShardError, whether the shard is opened through a reader or located (its rows found from the
format's own record, ShardFormat.locate); reading turns it into CorruptSampleError naming shard and
sample, and (when asked) checks CRC32 and label range.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Protocol, Sequence

import numpy as np

from ..codecs.row_crc import row_crc32
from ..errors import (CorruptSampleError, CorruptShardError, ManifestError, OutOfFilesError, ShardkitError,
                      UsageError)
from ..integrity import OUT_OF_FILES, ShardFolder, open_shard_file, private_copy
from ..manifest import MANIFEST_NAME, SHARDS_DIR, Manifest
from ..records import Encoded
from ..sample_table import SampleTable, read_labels, shard_mismatch
from ..schema import SampleSchema
from .base import FormatOptions, ShardFormat, ShardReader
from .locating import FileRows, FileView

#: What a format's library may raise on a damaged file that its own checks did not catch;
#: the read side reports it as CorruptShardError / CorruptSampleError, never as itself.
READ_FAILURES = (OSError, ValueError, KeyError, IndexError, RuntimeError, TypeError, EOFError)


def version_problem(fmt: ShardFormat, version: int) -> "str | None":
    """Why a dataset of this format version cannot be read here, or None."""
    if version > fmt.version:
        return (f"{fmt.name} format version {version} is newer than this shardkit reads ({fmt.version}); "
                "upgrade shardkit")
    return None


def check_version(fmt: ShardFormat, version: int, where: str) -> None:
    """ManifestError when a manifest's format version is newer than this shardkit reads."""
    problem = version_problem(fmt, version)
    if problem:
        raise ManifestError(problem, path=where)


def recorded_options(fmt: ShardFormat, manifest: Manifest, root: str) -> FormatOptions:
    """The reader options the manifest of the dataset at root records (format_options), typed;
    ManifestError when it records one the format does not take, or a value of the wrong type."""
    try:
        return fmt.reader_options.from_dict(manifest.format_options, f"format_options for {fmt.name}")
    except UsageError as exc:
        raise ManifestError(str(exc), path=os.path.join(root, MANIFEST_NAME)) from None


#: Located rows of at most this many bytes (a small shard's) are checked against their CRC32s when
#: they open, from the bytes the locator's checks read (no read of their own up to 16 KiB). At open,
#: not at each row's first read: a located row is a view of the row arena, whose reads have no hook
#: short of a test on every read (the hot path), and an epoch reads every row of a shard it opens.
#: A shard with a failing row is read through its reader, as verify reads it.
CHECKED_ROWS_BYTES = 64 << 10


class ShardFiles(Protocol):
    """Where the files of a dataset that is not under its root lie: a remote dataset's local cache
    (remote/cache.py, RemoteShardCache). A file it gives stays (is pinned) until it is released."""

    @property
    def objects(self) -> str:
        """The folder every file it gives lies in."""

    def shard_path(self, shard: int) -> str:
        """Where the shard's file lies once fetched (nothing is fetched)."""

    def local_path(self, shard: int) -> str:
        """The shard's checked file, fetched if need be, pinned until release(shard)."""

    def release(self, shard: int) -> None:
        """End one use of local_path(shard)."""

    def table_path(self) -> str:
        """The sample table's checked file, pinned until release_table()."""

    def release_table(self) -> None:
        """End one use of table_path()."""


class CheckedShards:
    """The shards of one manifest (under root) for a reader of the dataset in this process: each
    open goes through here, as a reader (reader) or as rows located in the file (locate), and gets
    the same checks either way. `full`: each shard is copied privately while its sha256 is checked
    (open_file), so every byte read later is a byte that was hashed, whatever happens to the file.
    `files`: where the files lie when not under root (a remote dataset: root is then its URL, for
    messages); a shard open_file gave stays there until release(shard)."""

    def __init__(self, fmt: ShardFormat, manifest: Manifest, root: str, options: FormatOptions,
                 full: bool = False, role: str = "shard", files: Optional[ShardFiles] = None) -> None:
        self.format, self.manifest, self.root, self.options = fmt, manifest, root, options
        self.full, self.role, self.files = full, role, files
        self._names = manifest.shards.paths
        self._starts = manifest.shards.first_index
        self._table: Optional[SampleTable] = None
        self._folder: Optional[ShardFolder] = None

    def where(self, shard: int) -> "tuple[str, str]":
        """(file, manifest name) of a shard."""
        name = self._names[shard]
        if self.files is not None:
            return self.files.shard_path(shard), name
        return os.path.join(self.root, name), name

    def table(self) -> Optional[SampleTable]:
        """The dataset's sample table, mapped once per process (privately and hashed with `full`)
        until close(); None when the manifest lists none."""
        entry = self.manifest.sample_table
        if self._table is None and entry is not None:
            if self.files is None:
                self._table = SampleTable(self.root, entry, hashed=self.full)
                return self._table
            path = self.files.table_path()
            try:
                self._table = SampleTable(self.files.objects, entry, self.full, os.path.basename(path))
            except BaseException:
                self.files.release_table()
                raise
        return self._table

    def labels(self) -> Any:
        """Every label, from the sample table once its sha256 matches the manifest (read_labels)."""
        entry = self.manifest.sample_table
        assert entry is not None
        if self.files is None:
            return read_labels(self.root, entry)
        path = self.files.table_path()
        try:
            return read_labels(self.files.objects, entry, os.path.basename(path))
        finally:
            self.files.release_table()

    def open_file(self, shard: int) -> int:
        """A checked read-only descriptor of a shard (open_shard_file; through the shards folder
        held open when the shard is a plain name in it, as convert names them); with `full`, of a
        private copy whose sha256 matched the manifest. The caller closes it, and calls
        release(shard) once it holds nothing of the shard open."""
        if self.files is not None:
            path = self.files.local_path(shard)
            try:
                return self._checked(shard, path, self.files.objects)
            except BaseException:
                self.files.release(shard)
                raise
        path, name = self.where(shard)
        folder_name, _, file_name = name.rpartition("/")
        if folder_name == SHARDS_DIR and not self.full:
            try:
                return self._shards_folder().open(file_name, int(self.manifest.shards.sizes[shard]))
            except (OSError, ValueError):
                pass        # open_shard_file names what is wrong
        return self._checked(shard, path, self.root)

    def _checked(self, shard: int, path: str, root: str) -> int:
        size = int(self.manifest.shards.sizes[shard])
        fd = open_shard_file(path, root, size, f"{self.role} {shard}")
        if not self.full:
            return fd
        try:
            return private_copy(fd, path, size, self.manifest.shards.sha256s[shard], shard)
        finally:
            os.close(fd)

    def forked(self, shards: Sequence[int]) -> None:
        """In a forked child: keep these shards' files and the sample table's as open_file and
        table() do (the parent's pins are its own), for what the child keeps of its parent's."""
        if self.files is None:
            return
        for shard in shards:
            self.files.local_path(shard)
        if self._table is not None:
            self.files.table_path()

    def release(self, shard: int) -> None:
        """End the use of the shard's file that open_file or hold began (a remote dataset's cache
        may then evict it)."""
        if self.files is not None:
            self.files.release(shard)

    def close(self) -> None:
        """Drop the sample table (mapped again at the next open)."""
        if self._table is not None and self.files is not None:
            self.files.release_table()
        self._table = None

    def _shards_folder(self) -> ShardFolder:
        if self._folder is None:
            self._folder = ShardFolder(os.path.join(self.root, SHARDS_DIR), self.root)
        return self._folder

    def reader(self, shard: int, fd: int) -> ShardReader:
        """A reader of the shard open at fd (open_file), once its identity, count and (with a sample
        table) labels and CRC32s match the dataset's."""
        path, name = self.where(shard)
        reader = reader_of(self.format, self.manifest, shard, self.options, path, fd, f"{self.role} {shard}")
        table = self.table()
        if table is not None:
            problem = shard_mismatch(reader.tables(), table.labels, table.crcs, int(self._starts[shard]))
            if problem:
                reader.close()
                raise CorruptShardError(f"{problem} ({table.path}); run shardkit verify", path=path, shard=name)
        return reader

    def locate(self, shard: int, fd: int) -> Optional[FileRows]:
        """Where the shard open at fd (open_file) keeps its fixed-shape rows (ShardFormat.locate),
        once the format's record passed its own checks and its identity, count, labels and CRC32s
        match the dataset's; None where the format does not locate them (read through a reader)."""
        return self.locate_many([shard], [fd])[0]

    def locate_many(self, shards: Sequence[int], fds: Sequence[int]) -> List[Optional[FileRows]]:
        """locate for several shards (each open at its fd), with the same checks; the CRC32s of every
        small shard's rows are computed in one pass over all of them (a batch's or prepare's shards:
        about 1 us a shard instead of 10). CorruptShardError for the first shard found damaged."""
        table = self.table()
        if table is None:
            return [None] * len(shards)
        found = [self._located(shard, fd, table) for shard, fd in zip(shards, fds)]
        small = [k for k, one in enumerate(found) if one is not None and one[1] is not None]
        widths = {found[k][0].row_dtype.itemsize for k in small}    # type: ignore[index]
        if len(widths) == 1 and _rows_match(np.concatenate([found[k][1] for k in small]),      # type: ignore[index]
                                            np.concatenate([found[k][2] for k in small])):     # type: ignore[index]
            return [None if one is None else one[0] for one in found]
        # a row that fails: its shard is read through its reader, which names the row when reads are checked
        return [None if one is None or (one[1] is not None and not _rows_match(one[1], one[2])) else one[0]
                for one in found]

    def _located(self, shard: int, fd: int, table: SampleTable) -> "Optional[tuple[FileRows, Any, Any]]":
        """(the shard's rows, their bytes as a (rows, width) uint8 array when small enough to check
        at open, else None, and their little-endian CRC32s) once every check but the rows' own
        CRC32s passed; None where the format does not locate them."""
        path, name = self.where(shard)
        size = int(self.manifest.shards.sizes[shard])
        try:
            location = self.format.locate(fd, size, path, self.manifest.schema, self.options)
        except ShardkitError:
            raise
        except READ_FAILURES as exc:
            raise CorruptShardError(f"{self.role} {shard} cannot be located ({type(exc).__name__}: {exc})",
                                    path=path) from None
        if location is None:
            return None
        self.manifest.check_identity(location.dataset_id, path, shard)
        _check_count(location.count, self.manifest, shard, path)
        view = location.view if location.view is not None else FileView(fd, size, b"")
        labels = np.frombuffer(_read_range(view, location.labels, path), dtype="<i8")
        crcs = np.frombuffer(_read_range(view, location.crcs, path), dtype=location.crc_dtype)
        problem = shard_mismatch((labels, crcs), table.labels, table.crcs, int(self._starts[shard]))
        if problem:
            raise CorruptShardError(f"{problem} ({table.path}); run shardkit verify", path=path, shard=name)
        rows = location.rows
        nbytes = rows.row_count * rows.row_dtype.itemsize
        if nbytes > CHECKED_ROWS_BYTES:
            return rows, None, None
        # cheap here: the rows must be the ones their CRC32s describe. Copied: a view would keep the
        # bytes read first (up to 16 KiB) alive until the batch is checked, each batch's in fresh pages
        data = np.frombuffer(_read_range(view, (rows.offset, nbytes), path), np.uint8).reshape(rows.row_count, -1)
        return rows, data.copy(), np.array(crcs, "<u4")      # as shard_mismatch compares

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_table"] = state["_folder"] = None       # maps and descriptors never cross processes
        return state


def _rows_match(data: np.ndarray, crcs: np.ndarray) -> bool:
    """Whether the zlib.crc32 of each row of data is its entry in crcs (little-endian uint32)."""
    return row_crc32(data).tobytes() == crcs.tobytes()


def _read_range(view: FileView, where: "tuple[int, int]", path: str) -> "bytes | memoryview":
    """Bytes [offset, offset + size) of the file as view reads it; CorruptShardError when it ends sooner."""
    offset, size = where
    try:
        return view[offset:offset + size]
    except (IndexError, OSError):
        raise CorruptShardError(f"ends before byte {offset + size} its record points at", path=path) from None


def _check_count(count: int, manifest: Manifest, shard: int, path: str) -> None:
    expected = int(manifest.shards.num_samples[shard])
    if count != expected:
        raise CorruptShardError("holds", path=path, actual=f"{count} samples", expected=expected)


def open_checked(fmt: ShardFormat, manifest: Manifest, root: str, shard: int, options: FormatOptions, *,
                 role: str = "shard") -> ShardReader:
    """A reader of a manifest's shard through CheckedShards (one open of the file), for callers
    that open a shard once (re-sharding, writing the sample table)."""
    shards = CheckedShards(fmt, manifest, root, options, role=role)
    fd = shards.open_file(shard)
    try:
        return shards.reader(shard, fd)
    finally:
        os.close(fd)


def reader_of(fmt: ShardFormat, manifest: Manifest, shard: int, options: FormatOptions, path: str, fd: int,
              name: str) -> ShardReader:
    """A reader of the shard file open at fd (open_shard_file), once its dataset identity and sample
    count match the manifest."""
    reader = open_unchecked(fmt, path, manifest.schema, options, name, fd)
    try:
        check_reader(reader, manifest, shard, path)
    except BaseException:
        reader.close()
        raise
    return reader


def check_reader(reader: ShardReader, manifest: Manifest, shard: int, path: str) -> None:
    """CorruptShardError unless an open reader carries the manifest's dataset identity and the
    manifest's sample count for that shard (also for a reader shared with another dataset)."""
    manifest.check_identity(reader.dataset_id, path, shard)
    _check_count(len(reader), manifest, shard, path)


def open_unchecked(fmt: ShardFormat, path: str, schema: SampleSchema, options: Optional[FormatOptions],
                   name: str, fd: Optional[int] = None) -> ShardReader:
    """fmt.open_reader, with a library's own error on a damaged file reported as CorruptShardError."""
    try:
        return fmt.open_reader(path, schema, options, fd)
    except ShardkitError:
        raise
    except READ_FAILURES as exc:
        if isinstance(exc, OSError) and exc.errno in OUT_OF_FILES:
            raise OutOfFilesError(path) from None
        raise CorruptShardError(f"{name} cannot be opened ({type(exc).__name__}: {exc})",
                                path=path) from None


class SampleChecks:
    """Reads samples of the shards of one manifest (under root), reporting damage as
    CorruptSampleError: a shard is named by its number, and its file and manifest name are made
    only for an error (a read of one sample from each of 10,000 shards joins no path)."""

    def __init__(self, manifest: Manifest, root: str, verify: bool) -> None:
        self.classes = len(manifest.classes) if manifest.schema.labeled else 0   # labels in [0, classes)
        self.verify = verify        # check CRC32 and label range
        self._names = manifest.shards.paths
        self._root = root

    def where(self, shard: int) -> "tuple[str, str]":
        """(file, manifest name) of a shard."""
        name = self._names[shard]
        return os.path.join(self._root, name), name

    def read(self, reader: ShardReader, shard: int, local: int, index: Optional[int] = None,
             table: Optional[SampleTable] = None) -> Encoded:
        """Sample `local` of the reader of shard number `shard` (index: its global index); with the
        dataset's sample table (checked against this shard's tables), label and CRC32 come from it."""
        try:
            if table is None:
                encoded = reader.read(local)
            else:       # the table is read by global index
                assert index is not None
                encoded = Encoded(reader.payload(local), table.labels.item(index), table.crcs.item(index))
        except CorruptSampleError as exc:      # found inside the format: add what only the caller knows
            exc.shard, exc.global_index = self._names[shard], index
            raise
        except CorruptShardError:
            raise
        except READ_FAILURES as exc:
            path, name = self.where(shard)
            raise CorruptSampleError(path, local, f"cannot be read ({type(exc).__name__}: {exc})", shard=name,
                                     global_index=index) from None
        return self.check(encoded, shard, local, index) if self.verify else encoded

    def read_many(self, reader: ShardReader, shard: int, locals_: Sequence[int],
                  indices: Sequence[int]) -> List[Encoded]:
        """Samples of one shard in one backend pass; a failure is retried per sample to name it."""
        try:
            encoded = reader.read_many(locals_)
        except (CorruptShardError, *READ_FAILURES):
            return [self.read(reader, shard, local, index) for local, index in zip(locals_, indices)]
        if self.verify:
            for one, local, index in zip(encoded, locals_, indices):
                self.check(one, shard, local, index)
        return encoded

    def check(self, encoded: Encoded, shard: int, local: int, index: Optional[int] = None) -> Encoded:
        """The sample, if its CRC32 matches and its label lies in range (when verifying)."""
        if not self.verify:
            return encoded
        problem = None
        if not encoded.crc_ok():
            problem = "fails its CRC32 check"
        elif self.classes and not 0 <= encoded.label < self.classes:
            problem = f"has label {encoded.label}, outside the {self.classes} classes"
        if problem:
            path, name = self.where(shard)
            raise CorruptSampleError(path, local, problem, shard=name, global_index=index)
        return encoded
