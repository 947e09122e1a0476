"""Sources: find the input items of SRC and turn each into an Encoded sample.

Sources never import formats (except the shard-dataset source, through the registry only).
"""
from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .base import Converted, Skipped, Source


def open_source(src: str, options: Any) -> Source:
    """The Source for SRC: a shardkit dataset (it has a manifest.json), a table file (CSV, TSV,
    JSON Lines, Parquet, Arrow) or a folder of them, or an image tree (with or without a labels CSV)."""
    import os
    if not os.path.exists(src):
        raise UsageError(f"{src}: no such file or directory", path=src)
    if os.path.isfile(os.path.join(src, "manifest.json")):
        from .shard_dataset import ShardDatasetSource
        return ShardDatasetSource.open(src, options)
    from .tabular import TabularSource, holds_table_tree, is_table_path
    if os.path.isfile(src) and is_table_path(src):
        return TabularSource.scan(src, options)
    if os.path.isdir(src) and not getattr(options, "labels", None) and holds_table_tree(src):
        return TabularSource.scan(src, options)
    from .image_tree import ImageTreeSource
    if not os.path.isdir(src):
        raise UsageError(f"{src}: is a file; SRC must be an image folder, a .csv/.csv.gz file (or .tsv, .jsonl, "
                         ".parquet, .arrow) or a folder of them",
                         path=src)
    return ImageTreeSource.scan(src, options)


__all__ = ["Converted", "Skipped", "Source", "open_source"]
