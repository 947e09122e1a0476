"""convert() of the sources of named fields (sources/fields/): an image tree with sidecar files
(`sidecars=True`, `--sidecars`), a table with an image column (`image_column=C`,
`--image-column C`), or a dataset of named fields (re-sharded, or copied filtered: its stored
values copied as they are), read item by item into shardkit's Writer.

The items are taken in a seeded permutation (order "shuffled": the default for trees) or in the
source's order, in this process; an item that cannot be read, or whose values break the schema,
is skipped and listed in skipped.jsonl (or stops the run with on_error="fail"). With part=(I, N)
each part takes a contiguous 1/N of that order, so the merged parts hold a single run's order.
"""
from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional, Tuple, Union

from ..errors import ConversionError, SampleError, UsageError
from ..manifest import Manifest
from ..order import seeded_permutation
from ..remote.location import is_url
from ..runtime.progress import Progress
from ..sources.base import Skipped
from ..sources.fields import FieldItem, FieldSource
from ..units import parse_part
from .conversion import ConvertReport, refuse_nested
from .stored_fields import StoredFields, StoredItem, open_stored
from .writer import Writer

#: The convert keywords that apply to every source of named fields (the rest are usage errors) ...
WRITER_OPTIONS = {"format", "shard_size", "samples_per_shard", "order", "seed", "part", "resume", "overwrite",
                  "quiet", "on_error", "max_errors", "workers"}
#: ... and those of the files (a sidecar tree, a table) ...
FILE_OPTIONS = {"image_mode", "resize", "size", "quality", "validate", "sidecars", "label_field", "image_column",
                "label_column", "in_flight", "storage_options"}
#: ... and those of a dataset of named fields copied (its values are copied as stored).
STORED_OPTIONS = {"compression", "classes", "keys", "fraction", "label_field"}
#: The options of files that decide a dataset's bytes, recorded in its manifest (source.options) with its
#: format, order and seed; the part is the manifest's own `part`, and run options are never recorded.
RECORDED_OPTIONS = ("shard_size", "samples_per_shard", "image_mode", "resize", "size", "quality", "validate",
                    "sidecars", "label_field", "image_column", "label_column")
#: Values that mean "not given" (the CLI passes every option, with these for those not given).
_UNSET: Tuple[Any, ...] = (None, False, [], ())
_DEFAULTS = {"executor": "local", "on_error": "skip", "validate": "full"}
#: Items read at once (a sidecar archive's members for them come in few requests).
READ_BATCH = 64


def convert_fields(src: str, dst: str, format: str = "hdf5", stored: Optional[Manifest] = None,
                   **options: Any) -> ConvertReport:
    """Convert a source of named fields at SRC into a dataset at DST (see the module doc); stored:
    SRC's manifest when SRC is a dataset of named fields (conversion.fields_dataset)."""
    src, dst = os.fspath(src), os.fspath(dst)
    applies, what = (STORED_OPTIONS, "a dataset of named fields (its values are copied as stored)") \
        if stored is not None else (FILE_OPTIONS, "sources of named fields (--sidecars, --image-column)")
    foreign = sorted(name for name, value in options.items() if name not in WRITER_OPTIONS | applies
                     and value not in _UNSET and value != _DEFAULTS.get(name))
    if foreign:
        flags = ", ".join("--" + name.replace("_", "-") for name in foreign)
        raise UsageError(f"{flags} {'does' if len(foreign) == 1 else 'do'} not apply to {what}", path=src)
    if not is_url(src) and not os.path.exists(src):
        raise UsageError("no such file or directory", path=src)
    refuse_nested(src, dst)
    source = open_stored(src, stored, options) if stored is not None else open_field_source(src, options)
    try:
        return _convert_source(source, src, dst, format, options)
    finally:
        source.close()


def _convert_source(source: FieldSource, src: str, dst: str, format: str, options: Dict[str, Any]) -> ConvertReport:
    """The items of an open source of named fields, in the order asked, into a Writer at DST."""
    started = time.monotonic()
    order = options.get("order") or source.default_order
    seed = int(options.get("seed") or 0)
    positions = seeded_permutation(len(source), seed) if order == "shuffled" else None
    part = options.get("part")
    part = parse_part(part) if isinstance(part, str) else part
    first, stop = part_range(part, len(source))
    recorded = {"kind": "shuffled", "seed": seed} if order == "shuffled" else {"kind": "source"}
    with Writer(dst, source.fields, format=format, samples_per_shard=options.get("samples_per_shard"),
                shard_size=options.get("shard_size"), order="source", part=part,
                resume=bool(options.get("resume")), overwrite=bool(options.get("overwrite")),
                source={"kind": source.kind, "path": source.root if is_url(src) else os.path.abspath(src),
                        "summary": source.summary(), **_recorded(source, format, order, seed, options)},
                recorded_order=recorded) as writer:
        for item in source.scan_skipped:
            writer.skip(item.path, item.reason, at_scan=True)
        write_items(source, writer, positions, first + writer.resumed_samples, stop, options)
    report: ConvertReport = writer.report
    report.seconds = time.monotonic() - started
    return report


def _recorded(source: FieldSource, format: str, order: str, seed: int, options: Dict[str, Any]) -> Dict[str, Any]:
    """{"options": ...}: the options that decide the bytes, for repair and --append to replay (files only:
    a copied dataset of fields is repaired or appended to where it was copied from)."""
    if isinstance(source, StoredFields):
        return {}
    given = {name: options.get(name) for name in RECORDED_OPTIONS}
    recorded = {name: list(value) if isinstance(value, tuple) else value for name, value in given.items()
                if value not in _UNSET and value != _DEFAULTS.get(name)}
    return {"options": {**recorded, "format": format, "order": order, "seed": seed}}


def part_range(part: Optional[Tuple[int, int]], count: int) -> Tuple[int, int]:
    """[first, stop) positions of the order that part (I, N) takes: a contiguous 1/N of them."""
    if part is None:
        return 0, count
    return part[0] * count // part[1], (part[0] + 1) * count // part[1]


def open_field_source(src: str, options: Dict[str, Any]) -> FieldSource:
    """The source of named fields the options ask for."""
    image = {"mode": options.get("image_mode"), "resize": options.get("resize"), "quality": options.get("quality"),
             "size": tuple(options["size"]) if options.get("size") else None, "validate": options.get("validate")}
    if options.get("image_column") is not None:
        if options.get("sidecars") or options.get("label_field") is not None:
            raise UsageError("--image-column (a table) and --sidecars/--label-field (a tree) contradict each other")
        from ..sources.fields.tables import TableImages
        return TableImages(src, options["image_column"], options.get("label_column"), image)
    if not options.get("sidecars"):
        raise UsageError("--label-field applies to --sidecars (a tree of files sharing a stem)")
    if options.get("label_column") is not None:
        raise UsageError("--label-column applies to a table; a sidecar tree names its label field by --label-field")
    from ..sources.archives import is_archive_path
    from ..sources.fields.files import FolderFiles, MemberFiles
    from ..sources.fields.sidecars import SidecarTree
    if is_url(src) or is_archive_path(src):
        from ..sources.member_trees import open_tree
        files = MemberFiles(open_tree(src, options.get("storage_options")), int(options.get("in_flight") or 16))
        return SidecarTree(files, options.get("label_field"), image)
    if not os.path.isdir(src):
        raise UsageError("--sidecars needs SRC to be a folder, a tar or zip archive, or a URL of either",
                         path=src)
    return SidecarTree(FolderFiles(src), options.get("label_field"), image)


def write_items(source: FieldSource, writer: Writer, positions: Optional[Any], start: int, stop: int,
                options: Dict[str, Any], until: Optional[int] = None) -> None:
    """Items start..stop of the order into the writer, read READ_BATCH at a time; with `until`, no
    batch begins once shard `until` is sealed (a repair needs no later shard)."""
    with Progress(stop - start, "convert", quiet=options.get("quiet", True)) as bar:
        for first in range(start, stop, READ_BATCH):
            if until is not None and writer.sealed > until:
                return
            batch = range(first, min(first + READ_BATCH, stop))
            for item in source.read_many([position if positions is None else int(positions[position])
                                          for position in batch]):
                bar.advance(1, _write_item(item, writer, options))


def _write_item(item: Union[FieldItem, StoredItem, Skipped], writer: Writer, options: Dict[str, Any]) -> int:
    """One item into the writer (its source bytes), or skipped: counted against max_errors,
    raised with on_error="fail"."""
    if isinstance(item, StoredItem):
        writer.copy(item.record)
        return item.source_bytes
    if not isinstance(item, Skipped):
        try:
            writer.write(item.sample, key=item.key)
            return item.source_bytes
        except SampleError as exc:
            item = Skipped(item.key, exc.problem or str(exc))
    if options.get("on_error") == "fail":
        raise item.failure("--on-error fail")
    writer.skip(item.path, item.reason)
    limit: Optional[int] = options.get("max_errors")
    if limit is not None and writer.skipped > limit:
        raise ConversionError(f"more than {limit} inputs failed (--max-errors); last: {item.message()}")
    return 0
