"""The shard formats shardkit knows: each name and the module holding its FORMAT object. Adding a
format is one line here. Plain data, so option checks and the CLI can offer the names without
loading a format (formats/__init__.py loads them)."""
from __future__ import annotations

from typing import Dict, Tuple

FORMAT_MODULES: Dict[str, str] = {
    "hdf5": "shardkit.formats.hdf5",
    "lmdb": "shardkit.formats.lmdb",
    "pt": "shardkit.formats.pt",
}

#: Every format name, sorted.
FORMAT_NAMES: Tuple[str, ...] = tuple(sorted(FORMAT_MODULES))

__all__ = ["FORMAT_MODULES", "FORMAT_NAMES"]
