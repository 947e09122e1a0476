"""The one checked way to open a shard and read its samples, for the dataset, verify and re-sharding.

Opening checks the file against what the manifest says of it (present, size, sample count) and
turns whatever a format's library raises on a damaged file into CorruptShardError; reading turns
it into CorruptSampleError naming shard and sample, and (when asked) checks CRC32 and label range.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from ..errors import CorruptSampleError, CorruptShardError, ManifestError, ShardkitError
from ..records import Encoded
from ..schema import SampleSchema
from .base import ShardFormat, ShardReader

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
        raise ManifestError(f"{where}: {problem}", path=where)


def check_size(path: str, size: int, name: str) -> None:
    """CorruptShardError when the file at path is missing or not `size` bytes."""
    try:
        actual = os.path.getsize(path)
    except OSError:
        raise CorruptShardError(f"{path}: {name} is missing", path=path) from None
    if actual != size:
        raise CorruptShardError(f"{path}: {name} has {actual} bytes, manifest says {size} (truncated, extended "
                                "or replaced)", path=path)


def open_checked(fmt: ShardFormat, path: str, schema: SampleSchema, options: Dict[str, Any], *,
                 size: int, count: int, name: str) -> ShardReader:
    """A reader of the shard at path, after checking its size and sample count against the manifest."""
    check_size(path, size, name)
    reader = open_unchecked(fmt, path, schema, options, name)
    if len(reader) != count:
        actual = len(reader)
        reader.close()
        raise CorruptShardError(f"{path}: {name} holds {actual} samples, manifest says {count}", path=path)
    return reader


def open_unchecked(fmt: ShardFormat, path: str, schema: SampleSchema, options: Dict[str, Any],
                   name: str) -> ShardReader:
    """fmt.open_reader, with a library's own error on a damaged file reported as CorruptShardError."""
    try:
        return fmt.open_reader(path, schema, options)
    except ShardkitError:
        raise
    except READ_FAILURES as exc:
        raise CorruptShardError(f"{path}: {name} cannot be opened ({type(exc).__name__}: {exc})",
                                path=path) from None


class SampleChecks:
    """Reads samples of one dataset's shards, reporting damage as CorruptSampleError."""

    def __init__(self, classes: int, verify: bool) -> None:
        self.classes = classes      # labels must lie in [0, classes) when classes > 0
        self.verify = verify        # check CRC32 and label range

    def read(self, reader: ShardReader, path: str, shard: str, local: int, index: Optional[int] = None) -> Encoded:
        """Sample `local` of the reader (index: its global index, named in messages)."""
        try:
            encoded = reader.read(local)
        except CorruptSampleError:
            raise
        except (CorruptShardError, *READ_FAILURES) as exc:
            raise self._error(path, shard, local, index, f"cannot be read ({_describe(exc, path)})") from None
        return self.check(encoded, path, shard, local, index) if self.verify else encoded

    def read_many(self, reader: ShardReader, path: str, shard: str, locals_: Sequence[int],
                  indices: Sequence[int]) -> List[Encoded]:
        """Samples of one shard in one backend pass; a failure is retried per sample to name it."""
        try:
            encoded = reader.read_many(locals_)
        except (CorruptShardError, *READ_FAILURES):
            return [self.read(reader, path, shard, local, index) for local, index in zip(locals_, indices)]
        if self.verify:
            for one, local, index in zip(encoded, locals_, indices):
                self.check(one, path, shard, local, index)
        return encoded

    def check(self, encoded: Encoded, path: str, shard: str, local: int, index: Optional[int] = None) -> Encoded:
        """The sample, if its CRC32 matches and its label lies in range (when verifying)."""
        if self.verify and not encoded.crc_ok():
            raise self._error(path, shard, local, index, "fails its CRC32 check")
        if self.verify and self.classes and not 0 <= encoded.label < self.classes:
            raise self._error(path, shard, local, index,
                              f"has label {encoded.label}, outside the {self.classes} classes")
        return encoded

    @staticmethod
    def _error(path: str, shard: str, local: int, index: Optional[int], problem: str) -> CorruptSampleError:
        where = "" if index is None else f" (global index {index})"
        return CorruptSampleError(f"{path}: sample {local}{where} {problem}", path=path, shard=shard, index=local)


def _describe(exc: BaseException, path: str) -> str:
    if isinstance(exc, CorruptShardError):
        return str(exc).replace(f"{path}: ", "", 1)
    return f"{type(exc).__name__}: {exc}"
