"""repair(dst, src): the plan of a finished dataset rebuilt from SRC with the options its manifest
records, and its missing or damaged shards written again through repair_shards (the one repair
path, which --resume of a finished dataset takes too)."""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..options import split_convert_options
from ..runtime.workers import exit_if_importing_main
from ..sources import open_source
from .conversion import refuse_nested
from .conversion_plan import plan_conversion
from .recorded_options import replay_options
from .repair import finished_for, repair_shards


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

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def repair(dst: "str | os.PathLike[str]", src: "str | os.PathLike[str]", *, workers: Optional[int] = None,
           quiet: bool = True) -> RepairReport:
    """Write again the shards of the dataset at DST that are missing or damaged (and its sample table),
    from SRC, byte-identical to what the conversion wrote: its options come from the manifest and
    each rewritten shard must match the manifest's sha256 before it replaces anything. A SRC that
    no longer holds the same inputs is a ConversionError naming what differs, with DST untouched."""
    exit_if_importing_main()
    started = time.monotonic()
    dst, src = os.fspath(dst), os.fspath(src)
    manifest = finished_for(dst, "repairing")
    keywords = replay_options(manifest, dst)
    refuse_nested(src, dst, keywords.get("labels"))
    options, run, source_options = split_convert_options({**keywords, "workers": workers, "quiet": quiet})
    source = open_source(src, source_options, run)
    try:
        source.choose(options)
        plan = plan_conversion(source, options, src)
        if manifest.dataset_id is not None:          # SRC's fingerprint (mtimes, place) may differ
            plan = dataclasses.replace(plan, dataset_id=manifest.dataset_id)
        written, notes = repair_shards(manifest, dst, plan, source, run)
    finally:
        source.close()
    return RepairReport(dst=dst, src=src, num_shards=len(manifest.shards), shards_written=written,
                        seconds=time.monotonic() - started, repaired=notes)


__all__ = ["RepairReport", "repair"]
