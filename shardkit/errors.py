"""The ShardkitError tree: every expected failure owns a one-line message and an exit code."""
from __future__ import annotations

from typing import Optional


class ShardkitError(Exception):
    """Base of every error shardkit raises on purpose; the CLI prints it as one line."""

    exit_code = 1

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path


class UsageError(ShardkitError, ValueError):
    """The command was asked to do something it cannot (bad option, wrong kind of path)."""

    exit_code = 2


class NotADatasetError(UsageError, FileNotFoundError):
    """A path that should hold a shardkit dataset (a manifest.json) does not."""


class DestinationExistsError(UsageError, FileExistsError):
    """Converting into a non-empty DST without --overwrite or --resume."""


class ManifestError(ShardkitError, ValueError):
    """manifest.json is unreadable, edited, unsafe or of a version this shardkit cannot read."""


class SourceError(ShardkitError, ValueError):
    """An input file or tree cannot be used as given."""


class EmptySourceError(SourceError):
    """SRC holds no usable sample; nothing is written."""


class SampleError(SourceError):
    """One input item could not be turned into a sample (skipped unless --on-error fail)."""

    def __init__(self, message: str, *, path: Optional[str] = None, line: Optional[int] = None) -> None:
        super().__init__(message, path=path)
        self.line = line


class ConversionError(ShardkitError):
    """A conversion ran but had to stop (too many errors, --on-error fail, a write failure)."""


class ConversionInterrupted(ConversionError):
    """Ctrl-C (SIGINT) stopped a conversion; finished shards are kept for --resume. Exit 130,
    the shell's code for a command ended by SIGINT."""

    exit_code = 130


class LockedError(ShardkitError):
    """Another conversion holds the DST lock."""


class CorruptShardError(ShardkitError, OSError):
    """A shard is missing, truncated, or its structure does not add up."""

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        ShardkitError.__init__(self, message, path=path)


class ForeignShardError(CorruptShardError):
    """A shard file carries another dataset's identity: the dataset was replaced (converted again
    into the same folder) after its manifest was read."""


class CorruptSampleError(CorruptShardError):
    """One sample's bytes do not match the CRC32 stored with them."""

    def __init__(self, message: str, *, path: Optional[str] = None, shard: Optional[str] = None,
                 index: Optional[int] = None) -> None:
        super().__init__(message, path=path)
        self.shard = shard
        self.index = index
