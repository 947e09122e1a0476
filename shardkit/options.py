"""Typed convert options: one class per concern, each owning its fields, defaults, flags and checks.

- PlanOptions: what is written (format, shard bounds, compression, part); part of the plan.
- RunOptions: how the run goes (workers, errors, resume/overwrite, progress); never changes bytes.
- Source options: one class per source kind (ImageOptions, TabularOptions, ReshardOptions),
  chosen by the source registry once SRC's kind is known. An option of another kind is a usage
  error naming its flag; an unknown keyword is one too, with the closest known name.

Each option is declared once, as a field whose Flag holds its CLI spelling, help, choices and
metavar: `shardkit convert`'s click options are generated from the fields (cli/convert_cmd.py),
the values of both the CLI and the Python API are checked against the same field types and
choices here, and messages use the spelling. A new option is one field in the class that owns it.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import typing
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from .codecs.image import DEFAULT_BACKGROUND, DEFAULT_IMAGE_MODE, IMAGE_MODES
from .codecs.pillow import DEFAULT_MAX_IMAGE_PIXELS
from .codecs.validate import DEFAULT_VALIDATE, VALIDATE_MODES
from .errors import UnknownOptionError, UsageError
from .format_registry import FORMAT_NAMES
from .option_types import Flag, OptionSpec, given, option, typed_value, value_kind
from .runtime.workers import default_workers
from .schema import COMPRESSIONS
from .units import parse_part, parse_size

DEFAULT_FORMAT = "hdf5"
DEFAULT_SHARD_SIZE = "256MB"
DEFAULT_COMPRESSION = "none"
EXECUTORS = ("local", "ray")
ORDERS = ("shuffled", "source")
ON_ERROR = ("skip", "fail")
DEFAULT_PATH_COLUMN = "path"
DEFAULT_LABEL_COLUMN = "label"

T = TypeVar("T", bound="OptionGroup")
F = TypeVar("F", bound=Callable[..., Any])


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
        return cls.specs()[name].flag.spelling

    @classmethod
    def specs(cls) -> Dict[str, OptionSpec]:
        """Every field of cls as an OptionSpec, in declaration order."""
        hints = typing.get_type_hints(cls)
        found = {}
        for item in dataclasses.fields(cls):
            default = item.default if item.default is not dataclasses.MISSING else None
            flag = item.metadata["flag"]
            found[item.name] = OptionSpec(item.name, flag, value_kind(hints[item.name], flag), default)
        return found

    @classmethod
    def take(cls: Type[T], values: Dict[str, Any]) -> T:
        """An instance from the keywords of values that belong to cls (removed from values);
        None means "the default". Each value is checked against its field's type and choices."""
        specs = cls.specs()
        mine = {name: values.pop(name) for name in cls.names() if name in values}
        options = cls(**{name: typed_value(specs[name], value) for name, value in mine.items()
                         if value is not None})
        options.check()
        return options

    def check(self) -> None:
        """Raise UsageError for out-of-range or contradictory values."""

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


# ---- Flags two source kinds share: one declaration, whichever class takes them -------------
LABEL_COLUMN = Flag("--label-column", "Label column of a CSV source, or of --labels [default there: label].",
                    default_text="")
NO_LABELS = Flag("--no-labels", "Unlabeled samples.")
DELIMITER = Flag("--delimiter", "CSV delimiter, of a CSV source or of --labels (sniffed when omitted).")


@dataclass(frozen=True)
class PlanOptions(OptionGroup):
    """What is written: the format, how samples are cut into shards, compression, the part."""

    format: str = option("--format", DEFAULT_FORMAT, help="Shard format.", choices=FORMAT_NAMES)
    shard_size: Optional[Union[str, int]] = option(
        "--shard-size", help="Upper bound per shard, e.g. 256MB or 1GiB.", default_text=DEFAULT_SHARD_SIZE)
    samples_per_shard: Optional[int] = option("--samples-per-shard", help="Upper bound of samples per shard.")
    compression: str = option("--compression", DEFAULT_COMPRESSION, help="Storage compression.",
                              choices=COMPRESSIONS)
    compression_level: Optional[int] = option("--compression-level", help="gzip level 0-9.")
    readahead: Optional[bool] = option("--readahead/--no-readahead", help="LMDB/HDF5 readers: OS readahead.",
                                       default_text="by dataset size")
    part: Optional[Union[str, Tuple[int, int]]] = option("--part", help="Convert only part I of N (whole shards).",
                                                         metavar="I/N")
    order: Optional[str] = option("--order", help="Sample order: a seeded shuffle, or source order.",
                                  choices=ORDERS, default_text="shuffled; CSV tables: source")
    seed: Optional[int] = option("--seed", help="Seed of --order shuffled and of --fraction.",
                                 default_text="0")

    def check(self) -> None:
        if self.samples_per_shard is not None and self.samples_per_shard < 1:
            raise UsageError("--samples-per-shard must be at least 1")
        if self.compression_level is not None and self.compression != "gzip":
            raise UsageError("--compression-level applies to --compression gzip only")
        if self.compression_level is not None and not 0 <= self.compression_level <= 9:
            raise UsageError("--compression-level must be between 0 and 9")
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

    workers: int = Flag("--workers", "Processes writing shards (and parsing the files of a CSV tree) in parallel.",
                        default_text="$SHARDKIT_WORKERS, else the CPUs this process may use"
                        ).field(default_factory=default_workers)
    executor: str = option("--executor", "local", choices=EXECUTORS,
                           help="Write shards in local processes, or as Ray tasks (pip install 'shardkit[ray]').")
    address: Optional[str] = option("--address", help="--executor ray: the cluster to use.",
                                    metavar="auto|HOST:PORT", default_text="start a local Ray")
    on_error: str = option("--on-error", "skip", choices=ON_ERROR,
                           help="An input that cannot be converted is skipped (and listed in skipped.jsonl), "
                                "or stops the run.")
    max_errors: Optional[int] = option("--max-errors", help="Fail once more than N inputs were skipped.",
                                       metavar="N")
    resume: bool = option("--resume", False, help="Continue an interrupted conversion into DST, or repair a "
                                                  "finished one (shards missing or damaged are written again).")
    overwrite: bool = option("--overwrite", False, help="Replace the dataset already in DST.")
    append: bool = option("--append", False, help="Add SRC's inputs to the dataset in DST as new shards "
                                                  "(its options are the dataset's).")
    #: the Python API is silent; the CLI passes --quiet or not
    quiet: bool = option("--quiet", True, help="No progress bars, and no banners from Ray.", short="-q")
    in_flight: int = option("--in-flight", 16, help="SRC at a URL: objects or archive members fetched at once by "
                                                    "each process.", metavar="N")
    #: fsspec's options for a SRC (or labels CSV) at a URL: credentials, an endpoint. Python only (the
    #: command line takes credentials from the store's usual places), never shown or written anywhere.
    storage_options: Optional[Dict[str, Any]] = Flag(
        "storage_options", "The store's fsspec options for a SRC at a URL.", cli=False).field(None, repr=False)

    def check(self) -> None:
        if self.workers < 1:
            raise UsageError("--workers must be at least 1")
        if self.address is not None and self.executor != "ray":
            raise UsageError("--address applies to --executor ray only")
        if self.max_errors is not None and self.max_errors < 0:
            raise UsageError("--max-errors must be 0 or more")
        if self.resume and self.overwrite:
            raise UsageError("--resume and --overwrite contradict each other")
        if self.in_flight < 1:
            raise UsageError("--in-flight must be at least 1")
        if self.append and (self.resume or self.overwrite):
            raise UsageError("--append finishes an interrupted append by itself; it takes neither --resume "
                             "nor --overwrite")


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

    image_mode: str = option("--image-mode", DEFAULT_IMAGE_MODE, help="How images are stored.", choices=IMAGE_MODES)
    resize: Optional[int] = option("--resize", help="Shorter side in pixels (jpeg/png/webp).")
    size: Optional[Tuple[int, int]] = option("--size", help="Array size for --image-mode raw.", metavar="H W")
    quality: Optional[int] = option("--quality", help="Encoder quality for jpeg/webp.")
    background: str = option("--background", DEFAULT_BACKGROUND, help="Colour behind transparent pixels.")
    validate: str = option("--validate", DEFAULT_VALIDATE, choices=VALIDATE_MODES,
                           help="passthrough: decode every image (full), check headers and end markers (fast), "
                                "or only sniff the format (none).")
    max_image_pixels: Optional[int] = option(
        "--max-image-pixels", metavar="N", default_text=str(DEFAULT_MAX_IMAGE_PIXELS),
        help="Refuse images of more than N pixels, from their header, before decoding; recorded in the "
             "manifest and applied by verify --deep and readers.")
    labels: Optional[str] = option("--labels", help="CSV with a path and a label column.", metavar="FILE", path=True)
    path_column: str = option("--path-column", DEFAULT_PATH_COLUMN, help="Path column of --labels.")
    label_column: str = LABEL_COLUMN.field(DEFAULT_LABEL_COLUMN)
    delimiter: Optional[str] = DELIMITER.field()
    no_labels: bool = NO_LABELS.field(False)

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
        return {"mode": self.image_mode, "resize": self.resize, "size": self.size,
                "quality": self.quality, "background": self.background, "validate": self.validate,
                "max_image_pixels": self.max_image_pixels}


@dataclass(frozen=True)
class TabularOptions(SourceOptions):
    """How the rows of a CSV file or tree become samples."""

    applies_to = "a CSV source"

    label_column: Optional[str] = LABEL_COLUMN.field()
    no_labels: bool = NO_LABELS.field(False)
    delimiter: Optional[str] = DELIMITER.field()
    decimal: Optional[str] = option("--decimal", help="CSV/TSV: decimal mark of numbers, '.' or ','.",
                                    default_text=".")
    max_inflation: Optional[float] = option("--max-inflation", metavar="N", default_text="200; 0: no limit",
                                            help="Compressed tables: inflate to at most N times the file's size.")
    columns: Optional[Sequence[str]] = option("--columns", help="CSV: comma-separated columns to keep.")
    text_columns: Optional[Sequence[str]] = option("--text-columns",
                                                   help="CSV: comma-separated columns kept as UTF-8 text.")
    drop_columns: Optional[Sequence[str]] = option("--drop-columns",
                                                   help="Tables: comma-separated columns to leave out (the rest "
                                                        "are kept).")
    schema_file: Optional[str] = option("--schema", help="CSV: JSON schema overriding inference.", metavar="FILE",
                                        path=True)

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

    classes: Optional[Sequence[str]] = option(
        "--classes", metavar="A,B",
        help="Re-sharding: keep these classes only (comma-separated), relabelled 0..k-1 in their old order.")
    keys: Optional[str] = option("--keys", metavar="FILE", path=True,
                                 help="Re-sharding: keep the samples whose keys the file lists, one per line.")
    fraction: Optional[float] = option("--fraction", metavar="F",
                                       help="Re-sharding: keep a fraction F of each class, chosen by --seed.")

    def check(self) -> None:
        if self.classes is not None and not list(self.classes):
            raise UsageError("--classes names no class")
        if self.fraction is not None and not 0 < self.fraction <= 1:
            raise UsageError(f"--fraction must be above 0 and at most 1, not {self.fraction}")


@dataclass(frozen=True)
class FieldSourceOptions(SourceOptions):
    """SRC as a source of samples of named fields (writing/field_convert.py, docs/fields.md): which
    one it is, and a sidecar tree's label field."""

    applies_to = "a source of named fields (--sidecars, --image-column)"

    sidecars: bool = option("--sidecars", False, help="SRC is a tree (a folder, a tar or zip, a URL) whose files "
                                                      "sharing a stem are one sample of named fields (0001.jpg, "
                                                      "0001.txt).")
    label_field: Optional[str] = option("--label-field", metavar="EXT",
                                        help="--sidecars: the field (extension) whose files hold each sample's "
                                             "class name; re-sharding a dataset of fields: the label field "
                                             "--classes and --fraction go by.")
    image_column: Optional[str] = option("--image-column", metavar="C",
                                         help="SRC is a table whose column C holds image paths or bytes; its "
                                              "other columns are fields.")


#: Every option class a convert keyword can belong to, in the order `shardkit convert --help` lists them.
GROUPS: Tuple[Type[OptionGroup], ...] = (PlanOptions, ImageOptions, TabularOptions, ReshardOptions,
                                         FieldSourceOptions, RunOptions)


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


def option_specs() -> Iterator[OptionSpec]:
    """Each convert option once (an option two source kinds share comes with its first class), in
    GROUPS order: what the CLI generates its click options from."""
    seen = set()
    for group in GROUPS:
        for name, spec in group.specs().items():
            if name not in seen:
                seen.add(name)
                yield spec


def refuse_unknown(names: Iterable[str], known: Sequence[str], where: str, also: Sequence[str] = ()) -> None:
    """UnknownOptionError naming the first name not in known, with the closest of known and also
    (names accepted elsewhere in the same call) if any: a misspelt option must never be ignored."""
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, [*known, *also], n=1)
            raise UnknownOptionError(where, name, close[0] if close else None, sorted([*known, *also]))


def refuse_unknown_keywords(where: str) -> Callable[[F], F]:
    """Decorator: a keyword the function does not take is an UnknownOptionError naming the closest
    one it takes (not Python's bare TypeError), while type checkers still see its signature."""
    def decorate(function: F) -> F:
        known = list(inspect.signature(function).parameters)

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            refuse_unknown(kwargs, known, where)
            return function(*args, **kwargs)
        return typing.cast(F, checked)
    return decorate


def split_convert_options(values: Dict[str, Any]) -> Tuple[PlanOptions, RunOptions, Dict[str, Any]]:
    """convert() keywords -> plan options, run options and the given source keywords, each checked
    against its field's type (the source kind's class takes them once SRC's kind is known);
    UsageError for an unknown keyword or a value of the wrong type."""
    refuse_unknown(values, known_names(), "convert")
    rest = dict(values)
    plan = PlanOptions.take(rest)
    run = RunOptions.take(rest)
    specs = {spec.name: spec for spec in option_specs()}
    return plan, run, {name: typed_value(specs[name], value) for name, value in rest.items() if value is not None}


__all__ = ["DEFAULT_BACKGROUND", "DEFAULT_IMAGE_MODE", "FieldSourceOptions", "Flag", "ImageOptions", "OptionSpec",
           "PlanOptions", "ReshardOptions", "RunOptions", "SourceOptions", "TabularOptions",
           "known_names", "option_specs",
           "refuse_unknown", "refuse_unknown_keywords", "split_convert_options"]
