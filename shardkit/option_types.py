"""One convert option's declaration (Flag: CLI spelling, help, choices, metavar, default text) and
the check of a value against its field's type: what options.py builds its classes from, and what
the CLI generates its click options from."""
from __future__ import annotations

import numbers
import os
import typing
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple, Union

from .errors import UsageError

#: What a value of each field type may be (the kinds the CLI maps to click types).
KINDS = ("int", "float", "str", "path", "flag", "switch", "pair", "list", "any")


@dataclass(frozen=True)
class Flag:
    """How one convert option is spelt and explained on the command line: its one declaration,
    read by the generated click option, by the checks and by every message naming it.
    `default_text` is what "[default: ...]" says when the field's own default is not what a user
    should read (None: the field's default, if it has one; "": nothing)."""

    spelling: str                       # "--format"; a boolean pair reads "--readahead/--no-readahead"
    help: str
    choices: Tuple[str, ...] = ()
    metavar: Optional[str] = None
    default_text: Optional[str] = None
    short: Optional[str] = None         # "-q"
    path: bool = False                  # a file: str or os.PathLike, kept as str
    cli: bool = True                    # False: a Python keyword only (no option of `shardkit convert`)

    def field(self, default: Any = None, **kwargs: Any) -> Any:
        """A dataclass field taking this flag."""
        if "default_factory" in kwargs:
            return field(metadata={"flag": self}, **kwargs)
        return field(default=default, metadata={"flag": self}, **kwargs)


def option(spelling: str, default: Any = None, *, help: str, **flag: Any) -> Any:
    """A dataclass field with its Flag (the usual case: a flag one class owns)."""
    return Flag(spelling, help, **flag).field(default)


def given(value: Any) -> bool:
    """Whether a keyword was set (None, False and an empty list mean "not given")."""
    return value is not None and value is not False and value != [] and value != ()


@dataclass(frozen=True)
class OptionSpec:
    """One option as the CLI and the checks see it: keyword, flag, kind of value, default."""

    name: str
    flag: Flag
    kind: str
    default: Any

    def shown_default(self) -> str:
        """What "[default: ...]" says ("" for nothing)."""
        if self.flag.default_text is not None:
            return self.flag.default_text
        if self.default is None or self.kind == "flag":
            return ""
        return str(self.default)


def value_kind(annotation: Any, flag: Flag) -> str:
    """The kind (KINDS) of a field's values, from its type annotation."""
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    optional = typing.get_origin(annotation) is Union and len(args) == 1
    base = args[0] if optional else annotation
    origin = typing.get_origin(base)
    if base is bool:
        return "switch" if optional else "flag"
    if base is int:
        return "int"
    if base is float:
        return "float"
    if base is str:
        return "path" if flag.path else "str"
    if origin is tuple:
        return "pair"
    if origin in (list, Sequence, typing.get_origin(Sequence[str])):
        return "list"
    return "any"


def typed_value(spec: OptionSpec, value: Any) -> Any:
    """value as its field's kind wants it, or UsageError naming the flag: a number for a number,
    two for --size, comma-separated text or a list for a list of names, one of the choices."""
    flag, kind = spec.flag.spelling, spec.kind
    if kind in ("flag", "switch") and not isinstance(value, bool):
        raise UsageError(f"{flag} is on or off (True or False), not {value!r}")
    if kind == "int" and not _whole(value):
        raise UsageError(f"{flag} must be a whole number, not {value!r}")
    if kind == "float" and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise UsageError(f"{flag} must be a number, not {value!r}")
    if kind == "path" and not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{flag} must be a path, not {value!r}")
    if kind == "str" and not isinstance(value, str):
        raise UsageError(f"{flag} must be a string, not {value!r}")
    if kind == "pair" and (isinstance(value, (str, bytes)) or not isinstance(value, Sequence)
                           or len(value) != 2 or not all(_whole(part) for part in value)):
        raise UsageError(f"{flag} takes two whole numbers, {spec.flag.metavar or 'A B'}, not {value!r}")
    if kind == "list" and (not isinstance(value, (str, Sequence))
                           or not all(isinstance(part, str) for part in value)):
        raise UsageError(f"{flag} takes names separated by commas, or a list of names, not {value!r}")
    if spec.flag.choices and value not in spec.flag.choices:
        raise UsageError(f"{flag} must be one of {', '.join(spec.flag.choices)}, not {value!r}")
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "path":
        return os.fspath(value)
    if kind == "pair":
        return int(value[0]), int(value[1])
    return split_names(value) if kind == "list" else value


def _whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def split_names(value: "str | Sequence[str]") -> List[str]:
    """["a", "b"] from "a, b" (the CLI's spelling) or from a list; blanks dropped."""
    parts = value.split(",") if isinstance(value, str) else value
    return [part.strip() for part in parts if part.strip()]


__all__ = ["KINDS", "Flag", "OptionSpec", "given", "option", "split_names", "typed_value", "value_kind"]
