"""convert(): SRC -> plan -> shards written by the sink (in parallel) in a session -> manifest, written last."""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import ConversionError, EmptySourceError, UsageError
from ..manifest import MANIFEST_NAME, Manifest, ShardEntry, ShardTable, load_manifest
from ..options import DEFAULT_FORMAT, RunOptions, refuse_unknown_keywords, split_convert_options
from ..runtime.workers import exit_if_importing_main
from ..remote.location import is_url, redact_url
from ..sources import Skipped, Source, open_source
from .conversion_plan import ConversionPlan, plan_conversion
from .append import append_inputs
from .journal import Journal
from .recorded_options import record_options
from .repair import finished_dataset, repair_shards
from .runner import write_shards
from .session import ConversionSession
from .skip_log import skip_log_of
from .sink import ShardResult


@dataclass
class ConvertReport:
    """What a conversion did; to_dict() is the CLI's --json."""

    dst: str
    format: str
    num_samples: int
    num_shards: int
    shards_written: int
    shards_reused: int
    skipped: int
    bytes_written: int
    source_bytes: int
    seconds: float
    warnings: List[str] = field(default_factory=list)
    skipped_by_reason: Dict[str, int] = field(default_factory=dict)     # skip_log.reason_kind -> inputs
    ignored_by_extension: Dict[str, int] = field(default_factory=dict)  # files not of the source's kind

    @property
    def samples_per_second(self) -> float:
        return self.num_samples / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> Dict[str, Any]:
        data = dataclasses.asdict(self)
        data["samples_per_second"] = round(self.samples_per_second, 1)
        return data


@refuse_unknown_keywords("convert")
def convert(src: "str | os.PathLike[str]", dst: "str | os.PathLike[str]", *,
            format: str = DEFAULT_FORMAT,
            shard_size: Optional[Union[str, int]] = None,
            samples_per_shard: Optional[int] = None,
            compression: Optional[str] = None,
            compression_level: Optional[int] = None,
            readahead: Optional[bool] = None,
            part: Optional[Union[str, Tuple[int, int]]] = None,
            order: Optional[str] = None,
            seed: Optional[int] = None,
            image_mode: Optional[str] = None,
            resize: Optional[int] = None,
            size: Optional[Tuple[int, int]] = None,
            quality: Optional[int] = None,
            background: Optional[str] = None,
            validate: Optional[str] = None,
            max_image_pixels: Optional[int] = None,
            labels: "Optional[Union[str, os.PathLike[str]]]" = None,
            path_column: Optional[str] = None,
            label_column: Optional[str] = None,
            delimiter: Optional[str] = None,
            no_labels: bool = False,
            decimal: Optional[str] = None,
            max_inflation: Optional[float] = None,
            columns: Optional[Union[str, Sequence[str]]] = None,
            text_columns: Optional[Union[str, Sequence[str]]] = None,
            drop_columns: Optional[Union[str, Sequence[str]]] = None,
            schema_file: "Optional[Union[str, os.PathLike[str]]]" = None,
            classes: Optional[Union[str, Sequence[str]]] = None,
            keys: "Optional[Union[str, os.PathLike[str]]]" = None,
            fraction: Optional[float] = None,
            sidecars: bool = False,
            label_field: Optional[str] = None,
            image_column: Optional[str] = None,
            workers: Optional[int] = None,
            executor: Optional[str] = None,
            address: Optional[str] = None,
            on_error: Optional[str] = None,
            max_errors: Optional[int] = None,
            resume: bool = False,
            overwrite: bool = False,
            append: bool = False,
            quiet: bool = True,
            in_flight: Optional[int] = None,
            storage_options: Optional[Dict[str, Any]] = None) -> ConvertReport:
    """Convert SRC (an image tree, a table file or folder, or a shardkit dataset) into a dataset of
    shards at DST.

    Each keyword is the `shardkit convert` option of the same name with underscores
    (`samples_per_shard` for `--samples-per-shard`; `schema_file` for `--schema`), checked the same
    way: None (the default here) means the option's default, and an option that does not apply to
    SRC's kind is a UsageError, and a misspelt keyword an UnknownOptionError naming the closest one.
    `size` is a pair `(H, W)`; `columns` and `text_columns` take a list of names or the CLI's
    comma-separated text. The Python API is quiet unless `quiet=False`. A SRC (or `labels`) at a
    URL reaches its store with `storage_options` (fsspec's options: credentials, an endpoint), which
    are never written anywhere; without them the store's usual configuration applies.
    """
    return _convert(src, dst, {name: value for name, value in locals().items() if name not in ("src", "dst")})


def fields_dataset(src: str) -> Optional[Manifest]:
    """The manifest of the dataset of named fields at src (a local folder), else None: such a SRC
    is copied by convert_fields (writing/stored_fields.py)."""
    if is_url(src) or not os.path.isfile(os.path.join(src, MANIFEST_NAME)):
        return None
    manifest = load_manifest(src)
    return manifest if manifest.fields is not None else None


def _convert(src: "str | os.PathLike[str]", dst: "str | os.PathLike[str]", given: Dict[str, Any]) -> ConvertReport:
    exit_if_importing_main()
    stored = fields_dataset(os.fspath(src))
    if not given.get("append") and (given.get("sidecars") or stored is not None
                                    or any(given.get(name) is not None for name in ("image_column", "label_field"))):
        from .field_convert import convert_fields   # samples of named fields: writing/field_convert.py
        return convert_fields(os.fspath(src), os.fspath(dst), stored=stored,
                              **{name: value for name, value in given.items() if value is not None})
    options, run, source_options = split_convert_options(given)
    started = time.monotonic()
    src, dst = os.fspath(src), os.fspath(dst)
    refuse_nested(src, dst, source_options.get("labels"))
    Journal(dst).check_unlocked()
    if run.append:
        return append_inputs(src, dst, given, run, started)
    source = open_source(src, source_options, run)
    try:
        source.choose(options)
        plan = plan_conversion(source, options, src)
        finished = finished_dataset(dst, plan.fingerprint, run)
        if finished is not None:
            written, notes = repair_shards(finished, dst, plan, source, run)
            report = report_for(finished, dst, started, reused=len(finished.shards) - written)
            report.warnings = notes
            return report
        return _convert_source(source, src, dst, plan, run, started, record_options(options, source_options))
    finally:
        source.close()


def _convert_source(source: Source, src: str, dst: str, plan: ConversionPlan, run: RunOptions,
                    started: float, recorded: Dict[str, Any]) -> ConvertReport:
    with ConversionSession(dst, run) as session:
        created = session.start(plan.fingerprint)
        done, pending = session.split_done(plan.tasks, plan.fmt.extension)
        plan_skipped = source.plan_skipped()
        if plan_skipped and run.on_error == "fail":
            raise plan_skipped[0].failure("--on-error fail")
        already_skipped = len(plan_skipped) + sum(len(result.skipped) for result in done)
        if run.max_errors is not None and already_skipped > run.max_errors:
            raise ConversionError(f"more than {run.max_errors} inputs failed (--max-errors); "
                                  f"first: {_first_skip(done, plan_skipped)}")
        ctx = plan.sink_context(dst, source, run)
        results = done + write_shards(ctx, pending, run, already_skipped=already_skipped, latch=session.latch)
        results.sort(key=lambda result: result.shard)
        skip_log, scan_lines = skip_log_of(plan_skipped, results)
        manifest = _assemble(results, source, plan, ctx.format_options, created, plan_skipped, src, scan_lines)
        manifest.source["options"] = recorded
        manifest.source["summary"]["skipped_by_reason"] = skip_log.by_reason()
        if manifest.part is not None:
            manifest.source["summary"]["scan_skipped_by_reason"] = skip_log_of(plan_skipped, [])[0].by_reason()
        if manifest.num_samples == 0 and (plan.tasks or plan.part is None):
            raise EmptySourceError("no usable sample; every input was skipped "
                                   f"(first: {_first_skip(results, plan_skipped)})", path=src)
        session.finish(manifest, skip_log.lines())
    report = report_for(manifest, dst, started, reused=len(done))
    report.warnings = [f"class folder {name!r} holds no image" for name in source.summary().get("empty_classes", [])] \
        + list(source.summary().get("warnings", []))
    return report


def shown_source(src: str) -> str:
    """SRC as the manifest records it: an absolute path, or a URL without credentials."""
    return redact_url(src) if is_url(src) else os.path.abspath(src)


def refuse_nested(src: str, dst: str, labels: Optional[str] = None) -> None:
    """UsageError when DST is SRC, lies inside SRC, or holds SRC (or the labels CSV), links resolved:
    a DST inside SRC would become one more class on the next run, and --overwrite of a DST holding
    SRC would delete the input."""
    real_dst = os.path.realpath(dst)
    for role, path in (("SRC", src), ("the labels CSV", labels)):
        if path is None or is_url(path):
            continue
        real = os.path.realpath(path)
        if real == real_dst:
            raise UsageError(f"DST is {role}; write the converted dataset to another folder", path=dst)
        if os.path.commonpath([real, real_dst]) == real:
            raise UsageError(f"DST is inside {role} {path}; write the converted dataset outside it",
                             path=dst)
        if os.path.commonpath([real, real_dst]) == real_dst:
            raise UsageError(f"DST holds {role} {path}; write the converted dataset to another folder",
                             path=dst)


def _assemble(results: List[ShardResult], source: Source, plan: ConversionPlan, format_options: Dict[str, Any],
              created: str, plan_skipped: List[Skipped], src: str, scan_lines: int) -> Manifest:
    entries: List[ShardEntry] = []
    first = 0
    tags: Dict[str, int] = {}
    for result in results:
        entries.append(ShardEntry(result.path, result.num_samples, first, result.size, result.sha256))
        first += result.num_samples
        for tag, count in result.tags.items():
            tags[tag] = tags.get(tag, 0) + count
    per_label: Dict[int, int] = {}
    for result in results:
        for label, count in result.labels.items():
            per_label[int(label)] = per_label.get(int(label), 0) + count
    summary = source.summary()
    if source.classes:
        summary["samples_per_class"] = {name: per_label.get(number, 0) for number, name in enumerate(source.classes)}
    summary.update({
        "converted": first,
        "skipped": len(plan_skipped) + sum(len(result.skipped) for result in results),
        "bytes": sum(result.source_bytes for result in results),
        "detected": dict(sorted(tags.items())),
    })
    part: Optional[Dict[str, Any]] = None
    if plan.part is not None:
        # plan_skipped: skipped.jsonl starts with the scan's lines, the same in every part
        part = {"index": plan.part[0], "count": plan.part[1], "plan_fingerprint": plan.plan_fingerprint,
                "plan_shards": len(plan.ranges), "plan_skipped": scan_lines}
    from .. import __version__
    return Manifest(format_name=plan.fmt.name, format_version=plan.fmt.version, schema=plan.schema,
                    shards=ShardTable.from_entries(entries),
                    classes=list(source.classes),
                    source={"kind": source.kind, "path": shown_source(src), "summary": summary,
                            "fingerprint": plan.fingerprint},
                    format_options=format_options, created=created, shardkit_version=__version__,
                    part=part, order=plan.order, dataset_id=plan.dataset_id)


def _first_skip(results: List[ShardResult], plan_skipped: List[Skipped]) -> str:
    for item in plan_skipped:
        return item.message()
    for result in results:
        for line in result.skipped:
            return Skipped(**line).message()
    return "none"


def report_for(manifest: Manifest, dst: str, started: float, reused: int) -> ConvertReport:
    summary = manifest.source.get("summary", {})
    return ConvertReport(dst=dst, format=manifest.format_name, num_samples=manifest.num_samples,
                         num_shards=len(manifest.shards), shards_written=len(manifest.shards) - reused,
                         shards_reused=reused, skipped=int(summary.get("skipped", 0)),
                         bytes_written=manifest.total_bytes, source_bytes=int(summary.get("bytes", 0)),
                         seconds=time.monotonic() - started,
                         skipped_by_reason=dict(summary.get("skipped_by_reason", {})),
                         ignored_by_extension=dict(summary.get("other_files_by_extension", {})))


__all__ = ["ConvertReport", "convert", "refuse_nested", "report_for"]
