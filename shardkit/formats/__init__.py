"""The formats: get_format(name) loads the module format_registry.py names for it."""
from __future__ import annotations

import importlib
from typing import List

from ..errors import UsageError
from ..format_registry import FORMAT_MODULES, FORMAT_NAMES
from .base import ShardFormat, ShardReader, ShardWriter
from .checked import (READ_FAILURES, SampleChecks, check_reader, check_version, open_checked, open_shard_file,
                      open_unchecked, reader_of, recorded_options, version_problem)


def format_names() -> List[str]:
    """Names of every registered format, sorted."""
    return list(FORMAT_NAMES)


def get_format(name: str) -> ShardFormat:
    """The format object registered under name (imports its library on first use)."""
    try:
        module_name = FORMAT_MODULES[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r}; choose one of {', '.join(format_names())}") from None
    return importlib.import_module(module_name).FORMAT


__all__ = ["READ_FAILURES", "SampleChecks", "ShardFormat", "ShardReader", "ShardWriter", "check_reader",
           "check_version", "format_names", "get_format", "open_checked", "open_shard_file", "open_unchecked",
           "reader_of", "recorded_options", "version_problem"]
