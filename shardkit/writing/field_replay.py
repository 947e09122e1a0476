"""Converting again what a dataset of named fields was converted from (a sidecar tree, a table with
an image column), with the options its manifest records: the source opened as the conversion
opened it, its items taken in the conversion's order (or an append's new items in theirs), and
written by a Writer into a staging folder inside DST, as shards numbered and stamped as the
dataset's. One path for `repair` (damaged shards written again) and `convert --append` (new ones)."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

import numpy as np

from ..errors import UsageError
from ..field_views import column_views
from ..manifest import Manifest, ShardTable
from ..order import seeded_permutation
from ..schema import SampleSchema
from ..sources.fields import FieldSource
from .append_inputs import dataset_keys
from .field_convert import open_field_source, part_range, write_items
from .writer import Writer


def open_replayed(src: str, keywords: Dict[str, Any], manifest: Manifest) -> FieldSource:
    """SRC opened with the dataset's recorded options; UsageError when it is of another kind."""
    source = open_field_source(src, keywords)
    if source.kind != manifest.source.get("kind"):
        source.close()
        raise UsageError(f"is a {source.kind}; the dataset was converted from a {manifest.source.get('kind')}",
                         path=src)
    return source


def keys_of(manifest: Manifest, dst: str, shards: Optional[int] = None) -> Set[str]:
    """The keys of the dataset's samples (of its first `shards` shards), read from its first column's files."""
    view = next(iter(column_views(manifest).values()))
    if shards is not None:
        view = dataclasses.replace(view, shards=ShardTable.from_entries(list(view.shards)[:shards]), sample_table=None)
    return set(dataset_keys(view, dst))


def new_positions(keys: List[str], held: Set[str], keywords: Dict[str, Any]) -> np.ndarray:
    """The items of an append (keys: every item's, item_keys) whose key the dataset does not hold, in
    the order they are written: a seeded permutation of them (the dataset's seed) when its order is shuffled."""
    kept = np.array([item for item, key in enumerate(keys) if key not in held], dtype=np.int64)
    return kept[seeded_permutation(len(kept), int(keywords["seed"]))] if keywords["order"] == "shuffled" else kept


def converted_positions(source: FieldSource, keywords: Dict[str, Any]) -> np.ndarray:
    """The items the conversion wrote (its part of them), in the order it wrote them."""
    order = np.arange(len(source), dtype=np.int64)
    if keywords["order"] == "shuffled":
        order = np.asarray(seeded_permutation(len(source), int(keywords["seed"])), dtype=np.int64)
    first, stop = part_range(keywords.get("part"), len(order))
    return order[first:stop]


def item_keys(source: FieldSource) -> List[str]:
    """Every item's key, without reading an item (a sidecar tree's stems, a table's file:row)."""
    return [source.key(item) for item in range(len(source))]


def write_replay(source: FieldSource, stage: Path, positions: np.ndarray, keywords: Dict[str, Any],
                 schema: SampleSchema, onto: Manifest, until: Optional[int] = None,
                 record: Optional[Dict[str, Any]] = None, quiet: bool = True) -> Optional[Manifest]:
    """The items at `positions` written into a fresh dataset at stage, their shards numbered after
    onto's with its identity; with `until`, stopped once shard `until` is sealed (its files in
    stage/shards, no manifest: None). record: the staged manifest's source record. The staged manifest."""
    from ..manifest import load_manifest
    shutil.rmtree(stage, ignore_errors=True)
    stage.parent.mkdir(parents=True, exist_ok=True)
    writer = Writer(stage, list(schema.fields), format=keywords["format"],
                    samples_per_shard=keywords.get("samples_per_shard"), shard_size=keywords.get("shard_size"),
                    order="source", part=keywords.get("part"), onto=onto, source=record,
                    recorded_order=onto.order)
    try:
        for item in source.scan_skipped:
            writer.skip(item.path, item.reason, at_scan=True)
        write_items(source, writer, positions, 0, len(positions), {"quiet": quiet}, until=until)
    except BaseException:
        writer.abort()
        raise
    if until is not None and writer.sealed > until:
        writer.abort()                  # the shards sealed stay in stage/shards
        return None
    writer.close()
    return load_manifest(str(stage))


__all__ = ["converted_positions", "keys_of", "new_positions", "open_replayed", "write_replay"]
