"""The ShardkitError tree: every expected failure owns a one-line message and an exit code.

Like click's exceptions, each error keeps what its raiser knows as fields (the file, the shard,
the sample, the line, the problem, what was expected and found) and builds its message from them
in format_message(), whenever it is shown. An error pickles with its fields, so one raised in a
worker process reads the same in its parent. torch's DataLoader instead rebuilds a worker's
exception from its text alone, as `exc_type(message=text)`: every shardkit error takes that too,
and is then the same class with that text as its message and no fields."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

Shard = Union[int, str]     # a shard's number in the manifest, or its path there


def _rebuild(cls: type, fields: Dict[str, Any]) -> "ShardkitError":
    """An error of class cls with these fields (unpickling: no constructor signature involved)."""
    error: ShardkitError = (OSError if issubclass(cls, OSError) else Exception).__new__(cls)  # its layout's base
    error.__dict__.update(fields)
    BaseException.__init__(error, error.format_message())
    return error


class _FromText(type):
    """The errors' metaclass: `cls(message=text)` builds the error from its text alone (torch's
    ExceptionWrapper.reraise does so, as it finds the class attribute `message`)."""

    def __call__(cls, *args: Any, message: Optional[str] = None, **kwargs: Any) -> Any:
        if message is None:
            return super().__call__(*args, **kwargs)
        if args or kwargs:
            raise TypeError(f"{cls.__name__}(message=...) takes no other argument")
        return _rebuild(cls, {"text": str(message)})


class ShardkitError(Exception, metaclass=_FromText):
    """Base of every error shardkit raises on purpose; the CLI prints it as one line."""

    exit_code = 1
    # Fields default to None: an error rebuilt from its text (cls(message=text)) has none.
    problem: str = ""
    path: Optional[str] = None
    line: Optional[int] = None
    expected: Any = None
    actual: Any = None
    text: Optional[str] = None      # the whole message, for an error rebuilt from its text

    def __init__(self, problem: str, *, path: Optional[Union[str, "os.PathLike[str]"]] = None,
                 line: Optional[int] = None, expected: Any = None, actual: Any = None) -> None:
        self.problem = problem
        self.path = None if path is None else os.fspath(path)
        self.line = line
        self.expected, self.actual = expected, actual
        super().__init__(self.format_message())

    def location(self) -> List[str]:
        """Where the problem is, outermost first: the file (with its line), then shard or sample."""
        if not self.path:
            return []
        return [self.path if self.line is None else f"{self.path}:{self.line}"]

    def format_message(self) -> str:
        """'<where>: <problem>[ <actual>, expected <expected>]', built from the fields."""
        if self.text is not None:
            return self.text
        return ": ".join([*self.location(), self.detail()])

    @property
    def message(self) -> str:
        """The message (what str() gives); as a class attribute it tells torch to rebuild a
        worker's error as cls(message=text)."""
        return self.format_message()

    def after_file(self) -> str:
        """The message after its file (and line): for a caller that names the file itself."""
        if self.text is not None:
            return self.text
        return ": ".join([*self.location()[1 if self.path else 0:], self.detail()])

    def detail(self) -> str:
        """The problem, with what was found and expected."""
        if self.expected is None:
            return self.problem
        return f"{self.problem} {self.actual}, expected {self.expected}"

    def __str__(self) -> str:
        return self.format_message()

    def __reduce__(self) -> Any:
        """Pickles with its fields (worker processes send errors to their parent)."""
        return (_rebuild, (self.__class__, dict(self.__dict__)))


class UsageError(ShardkitError, ValueError):
    """The command was asked to do something it cannot (bad option, wrong kind of path)."""

    exit_code = 2


class UnknownOptionError(UsageError, TypeError):
    """A keyword no option class knows (a misspelt option is never ignored); a TypeError too, as
    Python raises for an unexpected keyword argument."""

    where: str = ""
    name: str = ""
    suggestion: Optional[str] = None
    known: Tuple[str, ...] = ()

    def __init__(self, where: str, name: str, suggestion: Optional[str] = None,
                 known: Sequence[str] = ()) -> None:
        self.where, self.name, self.suggestion, self.known = where, name, suggestion, tuple(known)
        super().__init__(f"unknown option {name!r}")

    def location(self) -> List[str]:
        return [self.where]

    def detail(self) -> str:
        """The option, with the closest known name, or all of them."""
        hint = f"did you mean {self.suggestion!r}?" if self.suggestion else f"known: {', '.join(self.known)}"
        return f"unknown option {self.name!r}; {hint}"


class UnguardedMainError(UsageError):
    """Worker processes could not start: each one imports the main script, and the script's
    top-level code (no `if __name__ == "__main__":` guard) calls shardkit again."""


class NotADatasetError(UsageError, FileNotFoundError):
    """A path that should hold a shardkit dataset (a manifest.json) does not."""


class DestinationExistsError(UsageError, FileExistsError):
    """Converting into a non-empty DST without --overwrite or --resume."""


class ManifestError(ShardkitError, ValueError):
    """manifest.json is unreadable, edited, unsafe or of a version this shardkit cannot read;
    shard names the manifest's shard entry the problem is in, if one."""

    shard: Optional[Shard] = None

    def __init__(self, problem: str, *, path: Optional[str] = None, shard: Optional[Shard] = None,
                 expected: Any = None, actual: Any = None) -> None:
        self.shard = shard
        super().__init__(problem, path=path, expected=expected, actual=actual)

    def location(self) -> List[str]:
        return super().location() + ([f"shard {self.shard}"] if self.shard is not None else [])


class SourceError(ShardkitError, ValueError):
    """An input file or tree cannot be used as given (line: the line of the file, if one)."""

    def __init__(self, problem: str, *, path: Optional[str] = None, line: Optional[int] = None) -> None:
        super().__init__(problem, path=path, line=line)


class EmptySourceError(SourceError):
    """SRC holds no usable sample; nothing is written."""


class SampleError(SourceError):
    """One input item could not be turned into a sample (skipped unless --on-error fail)."""


class ConversionError(ShardkitError):
    """A conversion ran but had to stop (too many errors, --on-error fail, a write failure);
    shard names the shard being written, if one."""

    shard: Optional[Shard] = None

    def __init__(self, problem: str, *, path: Optional[str] = None, line: Optional[int] = None,
                 shard: Optional[Shard] = None) -> None:
        self.shard = shard
        super().__init__(problem, path=path, line=line)

    def location(self) -> List[str]:
        return super().location() + ([f"shard {self.shard}"] if self.shard is not None else [])


class ConversionInterrupted(ConversionError):
    """Ctrl-C (SIGINT) stopped a conversion; finished shards are kept for --resume. Exit 130,
    the shell's code for a command ended by SIGINT."""

    exit_code = 130

    def __init__(self, path: str) -> None:
        super().__init__("interrupted; finished shards are kept — run the same command with --resume "
                         "to continue", path=path)


class LockedError(ShardkitError):
    """Another conversion holds the DST lock (the lock file's path in lock)."""

    lock: Optional[str] = None

    def __init__(self, path: str, lock: str) -> None:
        self.lock = lock
        super().__init__(f"another shardkit convert is writing here (lock {lock} is held); wait for it to "
                         "finish or stop it first", path=path)


class CorruptShardError(ShardkitError, OSError):
    """A shard is missing, truncated, or its structure does not add up; shard is its number or
    manifest path when the raiser knows it (a format's reader knows only the file)."""

    shard: Optional[Shard] = None

    def __init__(self, problem: str, *, path: Optional[str] = None, shard: Optional[Shard] = None,
                 expected: Any = None, actual: Any = None) -> None:
        self.shard = shard
        ShardkitError.__init__(self, problem, path=path, expected=expected, actual=actual)

    def location(self) -> List[str]:
        return super().location() + ([f"shard {self.shard}"] if self.shard is not None else [])


class OutOfFilesError(ShardkitError, OSError):
    """A shard could not be opened because the process has no file descriptor or memory map left
    (RLIMIT_NOFILE, vm.max_map_count): a resource limit, not damage."""

    def __init__(self, path: str) -> None:
        super().__init__("cannot be opened: this process has no file descriptor or memory map left (too many "
                         "open files or maps); pass a smaller max_open_shards, close other datasets, or raise "
                         "`ulimit -n` / vm.max_map_count", path=path)


class ForeignShardError(CorruptShardError):
    """A shard file carries another dataset's identity (actual) than its manifest (expected): the
    dataset was replaced (converted again into the same folder) after its manifest was read."""

    def __init__(self, path: str, shard: Shard, actual: str, expected: str) -> None:
        super().__init__("belongs to another dataset; the files were replaced, so open the dataset again "
                         "— its dataset_id is", path=path, shard=shard, actual=repr(actual),
                         expected=repr(expected))


class CorruptSampleError(CorruptShardError):
    """One sample cannot be trusted: its record is damaged, it fails its CRC32 check, or its
    label is out of range. Found inside a format, it names the shard file and local index; the
    dataset adds the manifest's shard path and the global index."""

    index: Optional[int] = None
    global_index: Optional[int] = None

    def __init__(self, path: str, index: int, problem: str, *, shard: Optional[str] = None,
                 global_index: Optional[int] = None) -> None:
        self.index = index
        self.global_index = global_index
        super().__init__(problem, path=path, shard=shard)

    def location(self) -> List[str]:
        """'<file>: sample <local> (global index <i>)': the file already names the shard."""
        where = f"sample {self.index}" + (f" (global index {self.global_index})" if self.global_index is not None
                                          else "")
        return ShardkitError.location(self) + [where]

    def detail(self) -> str:
        return self.problem


class RemoteError(ShardkitError, OSError):
    """A transfer to or from object storage failed (not found, denied, a server that kept failing,
    an object whose size or sha256 differs from the manifest). path is the object's URL with any
    credentials taken out; the message never holds a credential."""

    def __init__(self, problem: str, *, url: str) -> None:
        ShardkitError.__init__(self, problem, path=url)
