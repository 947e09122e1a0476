"""convert(): SRC -> planned shards written by the sink (in parallel) -> manifest, written last."""
from __future__ import annotations

import dataclasses
import datetime
import functools
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import (ConversionError, ConversionInterrupted, EmptySourceError,
                      ShardkitError, UnguardedMainError, UsageError)
from ..formats import get_format
from ..runtime.interrupt import SigintLatch
from ..runtime.workers import exit_if_importing_main
from .journal import Journal, claim_destination, remove_outputs, remove_stale_temps
from ..manifest import MANIFEST_NAME, SKIPPED_NAME, Manifest, ShardEntry, ShardTable, load_manifest
from ..options import DEFAULT_FORMAT, PlanOptions, RunOptions, refuse_unknown_keywords, split_convert_options
from .plan import ShardTask, make_tasks, planned_order, sample_order
from ..runtime.progress import Progress
from .table_writer import write_sample_table
from .commit import CommitPipeline
from .skip_log import skip_log_of
from .sink import (NOT_WRITABLE, ShardResult, SinkContext, explain_write_failure, reusable_result,
                   write_shard_file)
from ..sources import Skipped, Source, open_source


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
            workers: Optional[int] = None,
            executor: Optional[str] = None,
            address: Optional[str] = None,
            on_error: Optional[str] = None,
            max_errors: Optional[int] = None,
            resume: bool = False,
            overwrite: bool = False,
            quiet: bool = True) -> ConvertReport:
    """Convert SRC (an image tree, a table file or folder, or a shardkit dataset) into a dataset of
    shards at DST.

    Each keyword is the `shardkit convert` option of the same name with underscores
    (`samples_per_shard` for `--samples-per-shard`; `schema_file` for `--schema`), checked the same
    way: None (the default here) means the option's default, and an option that does not apply to
    SRC's kind is a UsageError, and a misspelt keyword an UnknownOptionError naming the closest one.
    `size` is a pair `(H, W)`; `columns` and `text_columns` take a list of names or the CLI's
    comma-separated text. The Python API is quiet unless `quiet=False`.
    """
    given = {name: value for name, value in locals().items() if name not in ("src", "dst")}
    exit_if_importing_main()
    plan, run, source_options = split_convert_options(given)
    started = time.monotonic()
    src, dst = os.fspath(src), os.fspath(dst)
    refuse_nested(src, dst, source_options.get("labels"))
    Journal(dst).check_unlocked()
    source = open_source(src, source_options, run)
    try:
        source.choose(plan)
        return _convert_source(source, src, dst, plan, run, started)
    finally:
        source.close()


def _convert_source(source: Source, src: str, dst: str, plan: PlanOptions, run: RunOptions,
                    started: float) -> ConvertReport:
    fmt = get_format(plan.format)
    schema = dataclasses.replace(source.schema, compression=plan.compression,
                                 compression_level=plan.compression_level)
    fmt.check(schema)
    if plan.readahead is not None and "readahead" not in fmt.reader_options.names():
        raise UsageError(f"--readahead/--no-readahead does not apply to {fmt.name} shards")
    order = sample_order(plan.order or source.default_order, plan.seed, seed_used=source.uses_seed)
    max_bytes = plan.max_shard_bytes
    budget = None if max_bytes is None else max(1, max_bytes - fmt.fixed_bytes)

    def stored_bytes(sizes: Any) -> Any:
        return fmt.sample_bytes(schema, sizes)

    ranges = source.plan_ranges(budget, plan.samples_per_shard, None, stored_bytes)
    if not ranges:
        raise EmptySourceError(f"no input to convert ({_describe_summary(source.summary())})"
                               f"{source.empty_hint()}", path=src)
    permutation = planned_order(ranges[-1][1], order)
    if permutation is not None:
        ranges = source.plan_ranges(budget, plan.samples_per_shard, permutation, stored_bytes)
    tasks = make_tasks(ranges, plan.part_tuple)
    source_fingerprint = source.fingerprint()       # hashes every item's path, size and mtime: once
    plan_fingerprint = _fingerprint(source_fingerprint, plan, schema, ranges, order, part=None)
    fingerprint = _fingerprint(source_fingerprint, plan, schema, ranges, order, part=plan.part_tuple)
    finished = _already_complete(dst, fingerprint, run)
    if finished is not None:
        return _report_for(finished, dst, started, reused=len(finished.shards))
    created_dst = not os.path.lexists(dst)
    try:
        journal = claim_destination(dst, overwrite=run.overwrite, resume=run.resume)
    except OSError as exc:
        if isinstance(exc, ShardkitError):
            raise
        raise _destination_failure(dst, exc) from None
    latch = SigintLatch().__enter__()     # left in the finally below, after the manifest
    try:
        created = _start_or_resume(journal, fingerprint, run)
        remove_stale_temps(dst)
        done, pending = _split_done(journal, dst, tasks, fmt.extension)
        plan_skipped = source.plan_skipped()
        if plan_skipped and run.on_error == "fail":
            raise plan_skipped[0].failure("--on-error fail")
        already_skipped = len(plan_skipped) + sum(len(result.skipped) for result in done)
        if run.max_errors is not None and already_skipped > run.max_errors:
            raise ConversionError(f"more than {run.max_errors} inputs failed (--max-errors); "
                                  f"first: {_first_skip(done, plan_skipped)}")
        ctx = SinkContext(dst=dst, source=source, format_name=fmt.name, schema=schema,
                          format_options=fmt.default_options(schema, source.estimated_bytes()),
                          writer_options=fmt.writer_options(),
                          on_error=run.on_error, max_errors=run.max_errors, error_limit=run.max_errors,
                          order=permutation, dataset_id=dataset_identity(plan_fingerprint))
        if plan.readahead is not None:
            ctx.format_options["readahead"] = bool(plan.readahead)
        results = done + _run(ctx, pending, run, already_skipped=already_skipped, latch=latch)
        results.sort(key=lambda result: result.shard)
        manifest = _assemble(results, source, fmt, ctx, created, fingerprint, plan_skipped, plan.part_tuple, src,
                             order)
        skip_log, scan_lines = skip_log_of(plan_skipped, results)
        manifest.source["summary"]["skipped_by_reason"] = skip_log.by_reason()
        if manifest.part is not None:
            # plan_skipped: skipped.jsonl starts with the scan's skips, the same lines in every part
            manifest.part.update(plan_fingerprint=plan_fingerprint, plan_shards=len(ranges),
                                 plan_skipped=scan_lines)
            manifest.source["summary"]["scan_skipped_by_reason"] = skip_log_of(plan_skipped, [])[0].by_reason()
        if manifest.num_samples == 0 and (tasks or plan.part_tuple is None):
            raise EmptySourceError("no usable sample; every input was skipped "
                                   f"(first: {_first_skip(results, plan_skipped)})", path=src)
        _write_skipped(dst, skip_log.lines())
        manifest.sample_table = write_sample_table(dst, manifest)
        latch.check()                     # a Ctrl-C swallowed anywhere so far still stops here
        manifest.save(dst)
        journal.remove()
    except KeyboardInterrupt:
        remove_stale_temps(dst)
        raise ConversionInterrupted(dst) from None
    except ConversionError:
        if not latch.hit:
            raise
        # a Ctrl-C that a library turned into an error of its own (torch.save: a RuntimeError
        # "unexpected pos"), which the sink reported as a failed write: it is an interruption
        remove_stale_temps(dst)
        raise ConversionInterrupted(dst) from None
    except EmptySourceError:
        # Nothing usable: leave no trace that could pass for a dataset.
        if created_dst:
            shutil.rmtree(dst, ignore_errors=True)
        else:
            remove_outputs(dst)
        raise
    except UnguardedMainError:
        # No worker started, so no shard was written: a DST made by this run goes again, and the
        # same call works once the script is fixed.
        if created_dst:
            shutil.rmtree(dst, ignore_errors=True)
        raise
    except OSError as exc:
        if isinstance(exc, ShardkitError):
            raise
        raise _destination_failure(dst, exc) from None
    finally:
        latch.__exit__(None, None, None)
        journal.unlock()
    report = _report_for(manifest, dst, started, reused=len(done))
    report.warnings = [f"class folder {name!r} holds no image" for name in source.summary().get("empty_classes", [])] \
        + list(source.summary().get("warnings", []))
    return report


def refuse_nested(src: str, dst: str, labels: Optional[str] = None) -> None:
    """UsageError when DST is SRC, lies inside SRC, or holds SRC (or the labels CSV), links resolved:
    a DST inside SRC would become one more class on the next run, and --overwrite of a DST holding
    SRC would delete the input."""
    real_dst = os.path.realpath(dst)
    for role, path in (("SRC", src), ("the labels CSV", labels)):
        if path is None:
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


def _destination_failure(dst: str, exc: OSError) -> ShardkitError:
    """A write outside any shard (DST itself, the journal, skipped.jsonl, the manifest) failed.
    A DST that cannot be written at all (read-only, no permission, not a real folder) is a usage
    error that --resume cannot help."""
    where = exc.filename if isinstance(exc.filename, str) else dst
    if exc.errno in NOT_WRITABLE:
        return UsageError(f"cannot write ({exc.strerror}); DST must be a folder this user can "
                          "write on a writable file system", path=where)
    return ConversionError(f"cannot write {explain_write_failure(exc, Path(where).parent)}", path=where)


def dataset_identity(plan_fingerprint: str) -> str:
    """The dataset_id stamped into every shard and the manifest: derived from the whole plan's
    fingerprint (SRC, options, schema, shard ranges), so output stays byte-identical run after run
    and every --part of one plan shares it; another SRC or other options give another one."""
    return hashlib.sha256(f"shardkit dataset {plan_fingerprint}".encode()).hexdigest()[:32]


def _fingerprint(source_fp: str, plan: PlanOptions, schema: Any, ranges: List[Tuple[int, int]],
                 order: Dict[str, Any], part: Optional[Tuple[int, int]]) -> str:
    """Digest of what the output depends on; with part=None it names the whole plan (for merge)."""
    record = {"source": source_fp, "format": plan.format, "schema": schema.to_dict(),
              "ranges": ranges, "order": order, "part": part}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def _already_complete(dst: str, fingerprint: str, run: RunOptions) -> Optional[Manifest]:
    """With --resume, a DST already finished from the same plan needs no work."""
    journal = Journal(dst)
    if not run.resume or not (Path(dst) / MANIFEST_NAME).is_file() or journal.exists():
        return None
    manifest = load_manifest(dst)
    if manifest.source.get("fingerprint") != fingerprint:
        raise UsageError("already holds a complete dataset made from other input or options; "
                         "use --overwrite to replace it", path=dst)
    if journal.root.exists():       # killed while removing its journal, after the manifest was written
        journal.lock()
        journal.remove()
    return manifest


def _start_or_resume(journal: Journal, fingerprint: str, run: RunOptions) -> str:
    """Record the plan of a fresh run, or check that a resumed run has the same plan."""
    previous = journal.read_plan()
    if run.resume and previous is not None:
        if previous.get("fingerprint") != fingerprint:
            raise UsageError("SRC or options differ from the interrupted run; "
                             "resume with the same ones, or use --overwrite to start over",
                             path=str(journal.root.parent))
        return str(previous["created"])
    created = _creation_time()
    journal.clear_done()
    journal.write_plan({"fingerprint": fingerprint, "created": created})
    return created


def _creation_time() -> str:
    """Now (UTC, whole seconds), or SOURCE_DATE_EPOCH when set, so two runs can agree byte for byte."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not epoch:
        moment = datetime.datetime.now(datetime.timezone.utc)
    elif epoch.isdigit():
        moment = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
    else:
        raise UsageError(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, not {epoch!r}")
    return moment.replace(microsecond=0).isoformat()


def _split_done(journal: Journal, dst: str, tasks: List[ShardTask],
                extension: str) -> Tuple[List[ShardResult], List[ShardTask]]:
    """Finished shards (a well-formed done record for exactly this shard, whose file still has
    the recorded sha256) and the tasks still to do."""
    done: List[ShardResult] = []
    pending: List[ShardTask] = []
    for task in tasks:
        result = reusable_result(dst, task, extension, journal.read_done(task.name))
        if result is not None:
            done.append(result)
        else:
            pending.append(task)
    return done, pending


def _run(ctx: SinkContext, tasks: List[ShardTask], options: RunOptions, already_skipped: int,
         latch: SigintLatch) -> List[ShardResult]:
    """Write the pending shards, in this process or in worker processes, with a progress bar.

    --max-errors counts every skipped input of the run; in one process the limit is exact
    (the run stops at the input that exceeds it), with workers it is checked per shard too.
    """
    total = sum(task.stop - task.start for task in tasks)
    skipped = already_skipped
    results: List[ShardResult] = []

    def remaining() -> Optional[int]:
        return None if options.max_errors is None else options.max_errors - skipped

    def count_skipped(result: ShardResult) -> None:
        nonlocal skipped
        skipped += len(result.skipped)
        if options.max_errors is not None and skipped > options.max_errors:
            raise ConversionError(f"more than {options.max_errors} inputs failed (--max-errors); "
                                  f"last: {Skipped(**result.skipped[-1]).message()}")

    def check(result: ShardResult) -> None:
        count_skipped(result)
        results.append(result)

    with Progress(total, "convert", quiet=options.quiet) as bar:
        def advance(items: int, nbytes: int) -> None:
            latch.check()
            bar.advance(items, nbytes)

        def set_totals(items: int, nbytes: int) -> None:
            latch.check()
            bar.set(items, nbytes)

        if options.executor == "local" and (options.workers <= 1 or len(tasks) <= 1):
            # Ctrl-C is raised by latch.check() between items and shards, never inside a format
            # library's write (torch.save calling back into Python aborts the process on one).
            with CommitPipeline() as pipeline, latch.deferred():
                for task in tasks:
                    latch.check()
                    written = write_shard_file(dataclasses.replace(ctx, max_errors=remaining()), task,
                                               progress=advance)
                    count_skipped(written.result)
                    for result in pipeline.submit(written):
                        results.append(result)
                results.extend(pipeline.finish())
        else:
            try:
                with latch.deferred():          # Ctrl-C is raised by set_totals, between the executor's waits
                    _executor(options)(dataclasses.replace(ctx, max_errors=remaining()), tasks,
                                       on_result=check, on_progress=set_totals)
            except BaseException:
                remove_stale_temps(ctx.dst)     # tasks stopped mid-shard leave their temporary files
                raise
            remove_stale_temps(ctx.dst)         # a lost task that was retried left its (randomly named) one
    return results


def _executor(options: RunOptions) -> Callable[..., None]:
    """run(ctx, tasks, on_result, on_progress) writing shards outside this process: spawned local
    workers (parallel.py) or Ray tasks (ray_executor.py), both through the same sink."""
    if options.executor == "ray":
        from .ray_executor import run_on_ray
        return functools.partial(run_on_ray, address=options.address)
    from .parallel import run_parallel
    return functools.partial(run_parallel, workers=options.workers)


def _assemble(results: List[ShardResult], source: Any, fmt: Any, ctx: SinkContext, created: str,
              fingerprint: str, plan_skipped: List[Skipped], part: Optional[Tuple[int, int]], src: str,
              order: Dict[str, Any]) -> Manifest:
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
    from .. import __version__
    return Manifest(format_name=fmt.name, format_version=fmt.version, schema=ctx.schema,
                    shards=ShardTable.from_entries(entries),
                    classes=list(source.classes),
                    source={"kind": source.kind, "path": os.path.abspath(src), "summary": summary,
                            "fingerprint": fingerprint},
                    format_options=ctx.format_options, created=created, shardkit_version=__version__,
                    part=None if part is None else {"index": part[0], "count": part[1]},
                    order=order, dataset_id=ctx.dataset_id)


def _write_skipped(dst: str, lines: List[Dict[str, Any]]) -> None:
    from ..integrity import atomic_write_bytes
    text = "".join(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n" for line in lines)
    atomic_write_bytes(Path(dst) / SKIPPED_NAME, text.encode("utf-8", "surrogateescape"))


def _first_skip(results: List[ShardResult], plan_skipped: List[Skipped]) -> str:
    for item in plan_skipped:
        return item.message()
    for result in results:
        for line in result.skipped:
            return Skipped(**line).message()
    return "none"


def _describe_summary(summary: Dict[str, Any]) -> str:
    return ", ".join(f"{key.replace('_', ' ')}: {value}" for key, value in summary.items()
                     if isinstance(value, int)) or "empty"


def _report_for(manifest: Manifest, dst: str, started: float, reused: int) -> ConvertReport:
    summary = manifest.source.get("summary", {})
    return ConvertReport(dst=dst, format=manifest.format_name, num_samples=manifest.num_samples,
                         num_shards=len(manifest.shards), shards_written=len(manifest.shards) - reused,
                         shards_reused=reused, skipped=int(summary.get("skipped", 0)),
                         bytes_written=manifest.total_bytes, source_bytes=int(summary.get("bytes", 0)),
                         seconds=time.monotonic() - started,
                         skipped_by_reason=dict(summary.get("skipped_by_reason", {})),
                         ignored_by_extension=dict(summary.get("other_files_by_extension", {})))


__all__ = ["ConvertReport", "ShardkitError", "convert"]
