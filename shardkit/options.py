"""Typed convert options: one class per concern, each owning its fields, defaults, flags and checks.

- PlanOptions: what is written (format, shard bounds, compression, part); part of the plan.
- RunOptions: how the run goes (workers, errors, resume/overwrite, progress); never changes bytes.
- Source options: one class per source kind (ImageOptions, TabularOptions, ReshardOptions),
  chosen by the source registry once SRC's kind is known. An option of another kind is a usage
  error naming its flag; an unknown keyword is one too, with the closest known name.

Each field states its CLI spelling once (``flag``); messages use it, nothing rebuilds it from the
field name. A new option is one field in the class that owns it.
"""
from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from .codecs.validate import DEFAULT_VALIDATE
from .errors import UnknownOptionError, UsageError
from .units import parse_part, parse_size
from .runtime.workers import default_workers

DEFAULT_FORMAT = "hdf5"
DEFAULT_SHARD_SIZE = "256MB"
DEFAULT_IMAGE_MODE = "passthrough"
DEFAULT_BACKGROUND = "#ffffff"
DEFAULT_COMPRESSION = "none"
EXECUTORS = ("local", "ray")
DEFAULT_PATH_COLUMN = "path"
DEFAULT_LABEL_COLUMN = "label"

T = TypeVar("T", bound="OptionGroup")


def option(flag: str, default: Any = None, **kwargs: Any) -> Any:
    """A dataclass field carrying its CLI spelling."""
    return field(default=default, metadata={"flag": flag}, **kwargs)


def given(value: Any) -> bool:
    """Whether a keyword was set (None, False and an empty list mean "not given")."""
    return value is not None and value is not False and value != [] and value != ()


@dataclass(frozen=True)
class OptionGroup:
    """Base of the option classes: construction from keywords, flag spellings, validation."""

    #: Words for the thing these options belong to, used in "does not apply to ..." messages.
    applies_to = ""

    @classmethod
    def names(cls) -> List[str]:
        return [item.name for item in dataclasses.fields(cls)]

    @classmethod
    def flag(cls, name: str) -> str:
        """The CLI spelling of field name."""
        return {item.name: item.metadata["flag"] for item in dataclasses.fields(cls)}[name]

    @classmethod
    def take(cls: Type[T], values: Dict[str, Any]) -> T:
        """An instance from the keywords of values that belong to cls (removed from values);
        None means "the default"."""
        mine = {name: values.pop(name) for name in cls.names() if name in values}
        options = cls(**{name: value for name, value in mine.items() if value is not None})
        options.check()
        return options

    def check(self) -> None:
        """Raise UsageError for out-of-range or contradictory values."""

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PlanOptions(OptionGroup):
    """What is written: the format, how samples are cut into shards, compression, the part."""

    format: str = option("--format", DEFAULT_FORMAT)
    shard_size: Optional[Any] = option("--shard-size")
    samples_per_shard: Optional[int] = option("--samples-per-shard")
    compression: str = option("--compression", DEFAULT_COMPRESSION)
    compression_level: Optional[int] = option("--compression-level")
    readahead: Optional[bool] = option("--readahead/--no-readahead")
    part: Optional[Any] = option("--part")
    order: Optional[str] = option("--order")     # None: the source's default (shuffled; tables: source)
    seed: Optional[int] = option("--seed")       # None: 0 (with --order shuffled)

    def check(self) -> None:
        if self.samples_per_shard is not None and self.samples_per_shard < 1:
            raise UsageError("--samples-per-shard must be at least 1")
        if self.compression_level is not None and self.compression != "gzip":
            raise UsageError("--compression-level applies to --compression gzip only")
        if self.compression_level is not None and not 0 <= self.compression_level <= 9:
            raise UsageError("--compression-level must be between 0 and 9")
        if self.order not in (None, "shuffled", "source"):
            raise UsageError(f"--order must be shuffled or source, not {self.order!r}")
        if self.seed is not None and not 0 <= self.seed < 2 ** 63:
            raise UsageError("--seed must be between 0 and 2**63-1")
        _ = (self.max_shard_bytes, self.part_tuple)     # parse errors surface before anything runs

    @property
    def max_shard_bytes(self) -> Optional[int]:
        if self.shard_size is None and self.samples_per_shard is not None:
            return None
        return parse_size(self.shard_size if self.shard_size is not None else DEFAULT_SHARD_SIZE)

    @property
    def part_tuple(self) -> Optional[Tuple[int, int]]:
        if self.part is None or isinstance(self.part, tuple):
            return self.part
        return parse_part(self.part)


@dataclass(frozen=True)
class RunOptions(OptionGroup):
    """How a conversion runs; none of these changes the bytes written."""

    #: None: workers.default_workers() ($SHARDKIT_WORKERS, else the CPUs this process may use)
    workers: int = field(default_factory=default_workers, metadata={"flag": "--workers"})
    executor: str = option("--executor", "local")       # local | ray (ray_executor.py)
    address: Optional[str] = option("--address")        # --executor ray: auto | HOST:PORT; None: a local Ray
    on_error: str = option("--on-error", "skip")
    max_errors: Optional[int] = option("--max-errors")
    resume: bool = option("--resume", False)
    overwrite: bool = option("--overwrite", False)
    quiet: bool = option("--quiet", True)      # the Python API is silent; the CLI passes --quiet or not

    def check(self) -> None:
        if self.on_error not in ("skip", "fail"):
            raise UsageError(f"--on-error must be skip or fail, not {self.on_error!r}")
        if self.workers < 1:
            raise UsageError("--workers must be at least 1")
        if self.executor not in EXECUTORS:
            raise UsageError(f"--executor must be one of {', '.join(EXECUTORS)}, not {self.executor!r}")
        if self.address is not None and self.executor != "ray":
            raise UsageError("--address applies to --executor ray only")
        if self.max_errors is not None and self.max_errors < 0:
            raise UsageError("--max-errors must be 0 or more")
        if self.resume and self.overwrite:
            raise UsageError("--resume and --overwrite contradict each other")


@dataclass(frozen=True)
class SourceOptions(OptionGroup):
    """Base of the per-source-kind option classes."""

    @classmethod
    def for_source(cls: Type[T], values: Dict[str, Any], src: str) -> T:
        """The options of this source kind from the source keywords; UsageError naming each
        given option that belongs to another kind."""
        foreign = [name for name in known_names() if name not in cls.names() and given(values.get(name))]
        if foreign:
            flags = ", ".join(_flag_anywhere(name) for name in foreign)
            raise UsageError(f"{flags} {'does' if len(foreign) == 1 else 'do'} not apply to "
                             f"{cls.applies_to}", path=src)
        return cls.take({name: value for name, value in values.items() if name in cls.names()})


@dataclass(frozen=True)
class ImageOptions(SourceOptions):
    """How the images of an image tree become samples, and where their labels come from."""

    applies_to = "an image tree"

    image_mode: str = option("--image-mode", DEFAULT_IMAGE_MODE)
    resize: Optional[int] = option("--resize")
    size: Optional[Tuple[int, int]] = option("--size")
    quality: Optional[int] = option("--quality")
    background: str = option("--background", DEFAULT_BACKGROUND)
    validate: str = option("--validate", DEFAULT_VALIDATE)
    max_image_pixels: Optional[int] = option("--max-image-pixels")   # None: codecs/image.py's default
    labels: Optional[str] = option("--labels")
    path_column: str = option("--path-column", DEFAULT_PATH_COLUMN)
    label_column: str = option("--label-column", DEFAULT_LABEL_COLUMN)
    delimiter: Optional[str] = option("--delimiter")
    no_labels: bool = option("--no-labels", False)

    @classmethod
    def take(cls, values: Dict[str, Any]) -> "ImageOptions":
        without_labels = [name for name in ("path_column", "label_column", "delimiter")
                          if given(values.get(name))]
        if without_labels and not values.get("labels"):
            flags = ", ".join(cls.flag(name) for name in without_labels)
            raise UsageError(f"{flags} {'applies' if len(without_labels) == 1 else 'apply'} to a CSV source "
                             "or to the labels CSV of an image tree (--labels FILE)")
        return super().take(values)

    def check(self) -> None:
        if self.labels and self.no_labels:
            raise UsageError("--labels and --no-labels contradict each other")

    def codec_options(self) -> Dict[str, Any]:
        """make_image_codec keywords (the codec validates their combination)."""
        return {"mode": self.image_mode, "resize": self.resize, "size": tuple(self.size) if self.size else None,
                "quality": self.quality, "background": self.background, "validate": self.validate,
                "max_image_pixels": self.max_image_pixels}


@dataclass(frozen=True)
class TabularOptions(SourceOptions):
    """How the rows of a CSV file or tree become samples."""

    applies_to = "a CSV source"

    label_column: Optional[str] = option("--label-column")
    no_labels: bool = option("--no-labels", False)
    delimiter: Optional[str] = option("--delimiter")
    decimal: Optional[str] = option("--decimal")
    max_inflation: Optional[float] = option("--max-inflation")
    columns: Optional[Sequence[str]] = option("--columns")
    text_columns: Optional[Sequence[str]] = option("--text-columns")
    drop_columns: Optional[Union[str, Sequence[str]]] = option("--drop-columns")   # a list, or "a,b"
    schema_file: Optional[str] = option("--schema")

    def check(self) -> None:
        if self.no_labels and self.label_column:
            raise UsageError("--label-column and --no-labels contradict each other")
        if given(self.columns) and given(self.drop_columns):
            raise UsageError("--columns keeps the columns it names and --drop-columns keeps all others; "
                             "give one of them")


@dataclass(frozen=True)
class ReshardOptions(SourceOptions):
    """A shardkit dataset as SRC: its samples are copied as stored, so no sample option applies;
    which samples are copied may be chosen (sources/selection.py)."""

    applies_to = ("a shardkit dataset; its samples are copied as stored (convert the raw data to "
                  "change them)")

    classes: Optional[Sequence[str]] = option("--classes")
    keys: Optional[str] = option("--keys")
    fraction: Optional[float] = option("--fraction")

    def check(self) -> None:
        if self.classes is not None and not list(self.classes):
            raise UsageError("--classes names no class")
        if self.fraction is not None and not 0 < self.fraction <= 1:
            raise UsageError(f"--fraction must be above 0 and at most 1, not {self.fraction}")


#: Every option class a convert keyword can belong to.
GROUPS: Tuple[Type[OptionGroup], ...] = (PlanOptions, RunOptions, ImageOptions, TabularOptions, ReshardOptions)


def _flag_anywhere(name: str) -> str:
    for group in GROUPS:
        if name in group.names():
            return group.flag(name)
    return name


def known_names() -> List[str]:
    """Every keyword convert() accepts."""
    seen: Dict[str, None] = {}
    for group in GROUPS:
        seen.update(dict.fromkeys(group.names()))
    return list(seen)


def refuse_unknown(names: Iterable[str], known: Sequence[str], where: str, also: Sequence[str] = ()) -> None:
    """UnknownOptionError naming the first name not in known, with the closest of known and also
    (names accepted elsewhere in the same call) if any: a misspelt option must never be ignored."""
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, [*known, *also], n=1)
            raise UnknownOptionError(where, name, close[0] if close else None, sorted([*known, *also]))


def split_convert_options(values: Dict[str, Any]) -> Tuple[PlanOptions, RunOptions, Dict[str, Any]]:
    """convert() keywords -> plan options, run options and the source keywords (typed once the
    source kind is known); UsageError for an unknown keyword."""
    refuse_unknown(values, known_names(), "convert")
    rest = dict(values)
    plan = PlanOptions.take(rest)
    run = RunOptions.take(rest)
    return plan, run, rest


__all__ = ["DEFAULT_BACKGROUND", "DEFAULT_IMAGE_MODE", "ImageOptions", "PlanOptions", "ReshardOptions",
           "RunOptions", "SourceOptions", "TabularOptions", "refuse_unknown", "split_convert_options"]
