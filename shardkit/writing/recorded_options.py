"""The convert options a dataset was written with, recorded in its manifest (source.options) so that
`shardkit repair` and `convert --append` rebuild the same plan from SRC without being told them
again. Only what changes the bytes is recorded: the plan options but --part (the manifest's `part`
says it) and the source options given; run options (workers, errors, resume) never are."""
from __future__ import annotations

import os
from typing import Any, Dict

from ..errors import UsageError
from ..manifest import Manifest
from ..options import PlanOptions, option_specs

#: The kinds of the sources of named fields that a dataset's recorded options convert again (field_convert.py).
FIELD_FILE_KINDS = ("sidecar tree", "table with images")
#: Plan options that are not recorded: the part is the manifest's own `part` entry.
_NOT_RECORDED = ("part",)


def record_options(plan: PlanOptions, source_options: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON-ready options of a conversion: plan options (defaults included) and the source
    options given, paths made absolute and pairs made lists."""
    kinds = {spec.name: spec.kind for spec in option_specs()}
    values = {name: value for name, value in plan.to_dict().items() if name not in _NOT_RECORDED}
    values.update(source_options)
    recorded: Dict[str, Any] = {}
    for name, value in sorted(values.items()):
        if value is None:
            continue
        if kinds.get(name) == "path":
            value = absolute(os.fspath(value))
        recorded[name] = list(value) if isinstance(value, tuple) else value
    return recorded


def absolute(path: str) -> str:
    """A local path made absolute; a URL (scheme://...) as it is."""
    return path if "://" in path else os.path.abspath(path)


def replay_options(manifest: Manifest, where: str) -> Dict[str, Any]:
    """convert() keywords that rebuild the plan of manifest's dataset (its part included);
    UsageError for a dataset written before its options were recorded, by shardkit.Writer, or
    copied from a dataset of named fields."""
    recorded = manifest.source.get("options")
    kind = manifest.source.get("kind")
    if manifest.fields is not None and kind not in FIELD_FILE_KINDS:
        if kind == "shardkit_dataset":
            raise UsageError("a dataset of named fields copied from another one (re-sharded or filtered) has no "
                             "files to replay: append to or repair the dataset it was copied from, then copy it "
                             "again", path=where)
        raise UsageError("a dataset of named fields written by shardkit.Writer has no SRC to replay: write it "
                         "again (a Writer continues after its sealed shards, docs/fields.md)", path=where)
    if not isinstance(recorded, dict):
        raise UsageError("the manifest records no conversion options (written by an older shardkit); "
                         "repair it with `shardkit convert SRC DST --resume` and the options it was "
                         "converted with", path=where)
    keywords = dict(recorded)
    if manifest.part is not None:
        keywords["part"] = (int(manifest.part["index"]), int(manifest.part["count"]))
    return keywords


__all__ = ["FIELD_FILE_KINDS", "absolute", "record_options", "replay_options"]
