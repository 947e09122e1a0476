"""The ShardkitError tree: every expected failure owns a one-line message and an exit code."""
from __future__ import annotations

from typing import Any, Optional, Sequence


class ShardkitError(Exception):
    """Base of every error shardkit raises on purpose; the CLI prints it as one line."""

    exit_code = 1

    def __init__(self, message: str, *, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path


class UsageError(ShardkitError, ValueError):
    """The command was asked to do something it cannot (bad option, wrong kind of path)."""

    exit_code = 2


class UnknownOptionError(UsageError, TypeError):
    """A keyword no option class knows (a misspelt option is never ignored); a TypeError too, as
    Python raises for an unexpected keyword argument. The message is built from its fields."""

    def __init__(self, where: str, name: str, suggestion: Optional[str] = None,
                 known: Sequence[str] = ()) -> None:
        self.where, self.name, self.suggestion, self.known = where, name, suggestion, tuple(known)
        super().__init__(self.format_message())

    def format_message(self) -> str:
        hint = f"; did you mean {self.suggestion!r}?" if self.suggestion else f"; known: {', '.join(self.known)}"
        return f"{self.where}: unknown option {self.name!r}{hint}"

    def __str__(self) -> str:
        return self.format_message()

    def __reduce__(self) -> Any:
        return (self.__class__, (self.where, self.name, self.suggestion, self.known))


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
    """One sample cannot be trusted: its record is damaged, it fails its CRC32 check, or its
    label is out of range. Found inside a format, it names the shard file and local index; the
    dataset adds the manifest's shard path and the global index. Like click's exceptions, the
    message is built from these fields whenever it is shown."""

    def __init__(self, path: str, index: int, problem: str, *, shard: Optional[str] = None,
                 global_index: Optional[int] = None) -> None:
        self.index = index
        self.problem = problem
        self.shard = shard
        self.global_index = global_index
        super().__init__(problem, path=path)

    def format_message(self) -> str:
        """'<file>: sample <local> (global index <i>): <problem>'."""
        where = f"sample {self.index}" + (f" (global index {self.global_index})" if self.global_index is not None
                                          else "")
        return f"{self.path}: {where}: {self.problem}"

    def __str__(self) -> str:
        return self.format_message()

    def __reduce__(self) -> Any:
        """Pickles with its fields (worker processes send it to their parent)."""
        return (self.__class__, (self.path, self.index, self.problem),
                {"shard": self.shard, "global_index": self.global_index})
