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
from ..options import ImageOptions, RunOptions, TabularOptions
from ..remote.location import is_url
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


def open_source(src: str, source_options: Dict[str, Any], run: RunOptions, onto: Any = None) -> Source:
    """The Source for SRC, opened with its kind's typed options made from source_options (the
    convert keywords that belong to no plan or run option); UsageError for a keyword of another kind.
    onto: the Manifest of the dataset SRC's items join (Source.open_onto), for an append."""
    from .archives import is_archive_path
    if is_url(src) or is_archive_path(src):
        return _open_elsewhere(src, source_options, run)
    if not os.path.exists(src):
        raise UsageError("no such file or directory", path=src)
    for cls in source_classes():
        if cls.claims(src, source_options):
            options = cls.options_class.for_source(source_options, src)
            return cls.open(src, options, run) if onto is None else cls.open_onto(src, options, run, onto)
    raise UsageError("is a file; SRC must be an image folder, a .csv/.csv.gz file (or .tsv, .jsonl, "
                     ".parquet, .arrow) or a folder of them", path=src)


def _open_elsewhere(src: str, source_options: Dict[str, Any], run: RunOptions) -> Source:
    """A SRC at a URL or in an archive (the remote extra for URLs): an archive or a folder of
    images read in place (member_source.py), or tables fetched to a temporary folder first
    (staged_tables.py). A labels CSV at a URL is fetched the same way."""
    from .archives import is_archive_path
    from .member_source import MemberTreeSource
    from .member_trees import open_tree
    from .staged_tables import StagedTableSource, with_labels_at
    if not is_archive_path(src) and StagedTableSource.claims(src, source_options):
        return StagedTableSource.open(src, TabularOptions.for_source(source_options, src), run)
    if not is_url(src) and not os.path.isfile(src):
        raise UsageError("no such file", path=src)
    tree = open_tree(src, run.storage_options)
    if "manifest.json" in tree.listing.seen:
        raise UsageError("holds a shardkit dataset; to re-shard it, `shardkit pull` it to a folder and convert "
                         "that folder", path=tree.shown)
    if not is_archive_path(src) and not source_options.get("labels") and holds_only_tables(tree.listing.rels):
        return StagedTableSource.open(src, TabularOptions.for_source(source_options, src), run)
    options = ImageOptions.for_source(source_options, src)
    if options.labels and is_url(options.labels):
        return with_labels_at(tree, options, run)
    return MemberTreeSource.of_tree(tree, options, run)


def holds_only_tables(rels: List[str]) -> bool:
    """Whether a listing is a table folder: some table file and no image (as holds_table_tree)."""
    from ..codecs.pillow import image_extensions
    from .tabular.files import is_table_path
    from .tree import has_extension
    images = image_extensions()
    return any(is_table_path(rel) for rel in rels) and not any(has_extension(rel, images) for rel in rels)


__all__ = ["Converted", "Skipped", "Source", "open_source", "source_classes"]
