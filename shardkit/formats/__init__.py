"""Format registry: name -> module holding a FORMAT object. Adding a format is one line here."""
from __future__ import annotations

import importlib
from typing import Dict, List

from ..errors import UsageError
from .base import ShardFormat, ShardReader, ShardWriter
from .checked import (READ_FAILURES, SampleChecks, check_reader, check_version, open_checked, open_shard_file,
                      open_unchecked, reader_of, recorded_options, version_problem)

_REGISTRY: Dict[str, str] = {
    "hdf5": "shardkit.formats.hdf5",
    "lmdb": "shardkit.formats.lmdb",
    "pt": "shardkit.formats.pt",
}


def format_names() -> List[str]:
    """Names of every registered format, sorted."""
    return sorted(_REGISTRY)


def get_format(name: str) -> ShardFormat:
    """The format object registered under name (imports its library on first use)."""
    try:
        module_name = _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown format {name!r}; choose one of {', '.join(format_names())}") from None
    return importlib.import_module(module_name).FORMAT


__all__ = ["READ_FAILURES", "SampleChecks", "ShardFormat", "ShardReader", "ShardWriter", "check_reader",
           "check_version", "format_names", "get_format", "open_checked", "open_shard_file", "open_unchecked",
           "reader_of", "recorded_options", "version_problem"]
