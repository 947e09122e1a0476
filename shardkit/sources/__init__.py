"""Sources: find the input items of SRC and turn each into an Encoded sample.

Source kinds register as formats do: each class names the option class it takes and says
whether it claims a SRC; the first in registry order that claims SRC opens it.
Sources never import formats (except the shard-dataset source, through the registry only).
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Dict, List, Type

from ..errors import UsageError
from ..options import RunOptions
from .base import Converted, Skipped, Source

#: Source classes in the order they are asked to claim SRC: "module:Class". Adding a kind is one line.
_REGISTRY: List[str] = [
    "shardkit.sources.shard_dataset:ShardDatasetSource",    # a folder holding manifest.json
    "shardkit.sources.tabular:TabularSource",                # a table file (CSV, JSONL, Parquet, ...) or a folder
    "shardkit.sources.image_tree:ImageTreeSource",           # any other folder
]


def source_classes() -> List[Type[Source]]:
    """Every registered source class, in claiming order."""
    classes = []
    for entry in _REGISTRY:
        module, name = entry.split(":")
        classes.append(getattr(importlib.import_module(module), name))
    return classes


def open_source(src: str, source_options: Dict[str, Any], run: RunOptions) -> Source:
    """The Source for SRC, opened with its kind's typed options made from source_options (the
    convert keywords that belong to no plan or run option); UsageError for a keyword of another kind."""
    if not os.path.exists(src):
        raise UsageError("no such file or directory", path=src)
    for cls in source_classes():
        if cls.claims(src, source_options):
            return cls.open(src, cls.options_class.for_source(source_options, src), run)
    raise UsageError("is a file; SRC must be an image folder, a .csv/.csv.gz file (or .tsv, .jsonl, "
                     ".parquet, .arrow) or a folder of them", path=src)


__all__ = ["Converted", "Skipped", "Source", "open_source", "source_classes"]
