"""The one checked way to open a shard and read its samples, for the dataset, verify and re-sharding.

Opening checks the file against what the manifest says of it (a regular file inside the dataset,
its size, the dataset identity it carries, its sample count) and
turns whatever a format's library raises on a damaged file into CorruptShardError; reading turns
it into CorruptSampleError naming shard and sample, and (when asked) checks CRC32 and label range.
"""
from __future__ import annotations

import os
from typing import List, Optional, Sequence

from ..errors import (CorruptSampleError, CorruptShardError, ManifestError, OutOfFilesError, ShardkitError,
                      UsageError)
from ..integrity import OUT_OF_FILES, open_shard_file
from ..manifest import MANIFEST_NAME, Manifest
from ..records import Encoded
from ..sample_table import SampleTable
from ..schema import SampleSchema
from .base import FormatOptions, ShardFormat, ShardReader

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


def open_checked(fmt: ShardFormat, manifest: Manifest, root: str, shard: int, options: FormatOptions, *,
                 path: Optional[str] = None, role: str = "shard") -> ShardReader:
    """A reader of a manifest's shard, after checking the file (regular, inside root, its size),
    then the shard's dataset identity and sample count against the manifest: one open of the file."""
    entry = manifest.shards[shard]
    path = os.path.join(root, entry.path) if path is None else path
    name = f"{role} {shard}"
    fd = open_shard_file(path, root, entry.size, name)
    try:
        return reader_of(fmt, manifest, shard, options, path, fd, name)
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
    expected = int(manifest.shards.num_samples[shard])
    if len(reader) != expected:
        raise CorruptShardError("holds", path=path, actual=f"{len(reader)} samples", expected=expected)


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
