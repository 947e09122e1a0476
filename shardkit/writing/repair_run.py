"""repair(dst, src): the plan of a finished dataset rebuilt from SRC with the options its manifest
records, and its missing or damaged shards written again through repair_shards (the one repair
path, which --resume of a finished dataset takes too)."""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..errors import UsageError
from ..manifest import Manifest, ShardTable
from ..options import split_convert_options
from ..runtime.workers import exit_if_importing_main
from ..sources import open_source
from .conversion import refuse_nested
from .append import append_plan
from .append_inputs import new_items
from .conversion_plan import ConversionPlan, plan_conversion
from .recorded_options import replay_options
from .repair import damaged_shards, finished_for, repair_shards


@dataclass
class RepairReport:
    """What a repair did; to_dict() is the CLI's --json."""

    dst: str
    src: str
    num_shards: int
    shards_written: int
    seconds: float
    #: one line per file written again (its path and what was wrong with it)
    repaired: List[str] = field(default_factory=list)
    #: the SRC of each append given after src, in order
    appended_from: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def repair(dst: "str | os.PathLike[str]", src: "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]", *,
           workers: Optional[int] = None, quiet: bool = True) -> RepairReport:
    """Write again the shards of the dataset at DST that are missing or damaged (and its sample table),
    from SRC, byte-identical to what the conversion wrote: its options come from the manifest and
    each rewritten shard must match the manifest's sha256 before it replaces anything. A SRC that
    no longer holds the same inputs is a ConversionError naming what differs, with DST untouched.
    src may be a list: the conversion's SRC, then the NEW_SRC of each `convert --append` in order
    (needed only up to the last append whose shards need repair)."""
    exit_if_importing_main()
    started = time.monotonic()
    dst = os.fspath(dst)
    sources = [os.fspath(path) for path in ([src] if isinstance(src, (str, os.PathLike)) else src)]
    manifest = finished_for(dst, "repairing")
    appends = manifest.source.get("appended", [])
    if not 1 <= len(sources) <= 1 + len(appends):
        raise UsageError(f"give the conversion's SRC and at most one SRC for each of its {len(appends)} appends, "
                         f"in order; {len(sources)} given", path=dst)
    keywords = replay_options(manifest, dst)
    for path in sources:
        refuse_nested(path, dst, keywords.get("labels"))
    if manifest.fields is not None:                 # a dataset of named fields converted from files
        from .field_repair import repair_fields
        run = split_convert_options({"workers": workers, "quiet": quiet})[1]
        done = repair_fields(manifest, dst, sources, keywords, run)
        return RepairReport(dst=dst, src=sources[0], num_shards=len(manifest.shards), shards_written=done[0],
                            seconds=time.monotonic() - started, repaired=done[1], appended_from=sources[1:])
    options, run, source_options = split_convert_options({**keywords, "workers": workers, "quiet": quiet})
    bounds = [0] + [int(append["first_shard"]) for append in appends] + [len(manifest.shards)]
    damaged = damaged_shards(manifest, dst)         # checked again under the lock, by repair_shards
    written = 0
    notes: List[str] = []
    for number in range(len(bounds) - 1):
        shards = [shard for shard in damaged if bounds[number] <= shard < bounds[number + 1]]
        last = number == len(bounds) - 2
        if not shards and not last:
            continue                        # nothing of this conversion to rebuild: its SRC is not scanned
        if not shards or number >= len(sources):    # no SRC given for these: a damaged one is refused, naming it
            done = repair_shards(manifest, dst, None, None, run, shards, table=last, written_before=written > 0)
        else:
            source = open_source(sources[number], source_options, run, onto=manifest if number else None)
            try:
                plan = _plan_of(number, source, options, sources[number], manifest, dst)
                done = repair_shards(manifest, dst, plan, source, run, shards, table=last,
                                     written_before=written > 0)
            finally:
                source.close()
        written, notes = written + done[0], notes + done[1]
    return RepairReport(dst=dst, src=sources[0], num_shards=len(manifest.shards), shards_written=written,
                        seconds=time.monotonic() - started, repaired=notes, appended_from=sources[1:])


def _plan_of(number: int, source: Any, options: Any, src: str, manifest: Manifest, dst: str) -> ConversionPlan:
    """The plan that wrote the shards of conversion `number` (0: the conversion, then each append),
    rebuilt from its SRC: an append's new inputs are those whose key the shards before it do not
    hold, numbered after them, labelled by the dataset's classes (which only ever grow)."""
    source.choose(options)
    if number == 0:
        plan = plan_conversion(source, options, src)
    else:
        first = int(manifest.source["appended"][number - 1]["first_shard"])
        before = dataclasses.replace(manifest, shards=ShardTable.from_entries(list(manifest.shards)[:first]),
                                     sample_table=None)
        keep, _ = new_items(source, before, dst, src)
        source.restrict(keep, list(manifest.classes))
        plan = append_plan(source, options, src, before)
    if manifest.dataset_id is not None:          # SRC's fingerprint (mtimes, place) may differ
        plan = dataclasses.replace(plan, dataset_id=manifest.dataset_id)
    return plan


__all__ = ["RepairReport", "repair"]
