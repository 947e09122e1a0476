"""Sources: find the input items of SRC and turn each into an Encoded sample.

Sources never import formats (except the shard-dataset source, through the registry only).
"""
from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .base import Converted, Skipped, Source


def open_source(src: str, options: Any) -> Source:
    """The Source for SRC: a shardkit dataset (it has a manifest.json), a CSV file or CSV tree,
    or an image tree (with or without a labels CSV)."""
    import os
    if not os.path.exists(src):
        raise UsageError(f"{src}: no such file or directory", path=src)
    if os.path.isfile(os.path.join(src, "manifest.json")):
        from .shard_dataset import ShardDatasetSource
        return ShardDatasetSource.open(src, options)
    from .csv_table import CsvTableSource, holds_csv_tree, is_csv_path
    if os.path.isfile(src) and is_csv_path(src):
        return CsvTableSource.scan(src, options)
    if os.path.isdir(src) and not getattr(options, "labels", None) and holds_csv_tree(src):
        return CsvTableSource.scan(src, options)
    from .image_tree import ImageTreeSource
    if not os.path.isdir(src):
        raise UsageError(f"{src}: is a file; SRC must be an image folder, a .csv/.csv.gz file or a folder of them",
                         path=src)
    return ImageTreeSource.scan(src, options)


__all__ = ["Converted", "Skipped", "Source", "open_source"]
