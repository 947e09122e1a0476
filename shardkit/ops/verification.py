"""verify(): prove a dataset intact — quick (presence, sizes, counts), full (+ whole-file hashes),
deep (+ every sample's CRC32 and that every image decodes). Reports every problem found."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import CorruptShardError, ManifestError, UsageError
from ..formats import get_format, recorded_options
from ..integrity import hash_open_file
from ..runtime.isolation import ChildKilled, IsolatedCalls, run_isolated
from ..manifest import MANIFEST_NAME, SHARDS_DIR, Manifest, load_manifest
from ..runtime.progress import Progress
from ..sample_table import open_table_file
from ..runtime.workers import default_workers, exit_if_importing_main, run_in_workers
from ..field_views import column_views
from .field_checks import variable_shapes
from .shard_checks import Problem, check_shard, open_table_rows

MODES = ("quick", "full", "deep")


@dataclass
class VerifyReport:
    """Outcome of verify(); ok is True when no problem was found."""

    dst: str
    mode: str
    shards_checked: int = 0
    samples_checked: int = 0
    problems: List[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> Dict[str, Any]:
        return {"dst": self.dst, "mode": self.mode, "ok": self.ok, "shards_checked": self.shards_checked,
                "samples_checked": self.samples_checked, "problems": [p.to_dict() for p in self.problems]}


def verify(dst: str, mode: str = "full", workers: Optional[int] = None, quiet: bool = True,
           expect_manifest_sha256: Optional[str] = None) -> VerifyReport:
    """Check DST against its manifest; NotADatasetError if DST has no manifest at all.

    The checks detect damage, not tampering: anyone who can write DST can recompute every hash.
    For authenticity pass expect_manifest_sha256, the manifest_sha256 you got from a trusted
    channel; a dataset whose manifest differs is reported, whatever its own hashes say.
    workers=None: workers.default_workers().
    """
    exit_if_importing_main()
    workers = _checked_options(mode, workers, expect_manifest_sha256)
    dst = os.fspath(dst)
    report = VerifyReport(dst=dst, mode=mode)
    try:
        manifest = load_manifest(dst)
    except ManifestError as exc:
        report.problems.append(Problem("manifest", str(exc)))
        return report
    if expect_manifest_sha256 is not None:
        report.problems.extend(_unexpected_manifest(dst, expect_manifest_sha256.lower()))
    unreadable = _unreadable_format(dst, manifest)
    if unreadable is not None:
        report.problems.append(unreadable)
        return report
    report.problems.extend(_extra_files(dst, manifest))
    # a dataset of named fields: each column is checked as the dataset of one payload it is
    views = {"": manifest} if manifest.fields is None else column_views(manifest)
    for number, (column, view) in enumerate(views.items()):
        report.problems.extend(_sample_table_problems(dst, view, mode))
        for problems, samples in _check_shards(dst, view, mode, workers, quiet, column and f" {column}"):
            report.problems.extend(problems)
            report.samples_checked += samples if number == 0 else 0
    if manifest.fields is not None and mode == "deep":
        report.problems.extend(variable_shapes(dst, manifest))
    report.shards_checked = len(manifest.shards)
    return report


def _checked_options(mode: str, workers: Optional[int], expect_manifest_sha256: Optional[str]) -> int:
    """The number of workers, once the options are valid; UsageError otherwise."""
    if mode not in MODES:
        raise UsageError(f"unknown verify mode {mode!r}; choose quick, full or deep")
    if expect_manifest_sha256 is not None and not _is_sha256(expect_manifest_sha256):
        raise UsageError(f"--expect-manifest-sha256 must be 64 hex digits, not {expect_manifest_sha256!r}")
    workers = default_workers() if workers is None else workers
    if workers < 1:
        raise UsageError("--workers must be at least 1")
    return workers


def _check_shards(dst: str, manifest: Any, mode: str, workers: int, quiet: bool,
                  column: str = "") -> List[Tuple[List[Problem], int]]:
    """(problems, samples checked) of every shard, in shard order: in this process, in spawned
    workers, or (a format whose crafted files can crash its library) in isolated child processes."""
    shards = len(manifest.shards)
    batches = _batches(shards, workers)
    outcomes: List[List[Tuple[List[Problem], int]]] = [[] for _ in batches]
    with Progress(shards, f"verify ({mode}){column}", quiet=quiet, unit="shard") as bar:
        def done(number: int, outcome: List[Tuple[List[Problem], int]]) -> None:
            outcomes[number] = outcome
            start, stop = batches[number]
            bar.advance(stop - start, int(manifest.shards.sizes[start:stop].sum()))

        def done_json(number: int, outcome: Any) -> None:
            done(number, [([Problem(**problem) for problem in problems], int(samples))
                          for problems, samples in outcome])

        if get_format(manifest.format_name).crafted_files_crash:
            # each batch in a child process that a crafted file may kill without killing verify
            run_isolated(_check_batch_isolated, batches, workers, on_done=done_json, context=(dst, manifest, mode),
                         on_killed=lambda batch, error: _killed_batch(dst, manifest, mode, batch, error))
        else:
            started, number = time.monotonic(), 0
            while number < len(batches) and (number == 0 or workers == 1 or _finish_here(
                    time.monotonic() - started, batches[number - 1][1], shards - batches[number - 1][1])):
                done(number, _check_batch(dst, manifest, mode, batches[number]))
                number += 1
            rest = range(number, len(batches))
            if rest:
                # spawned, never forked: a fork of a threaded (torch) process can deadlock; the
                # manifest goes to each worker once (initializer), not with every batch
                run_in_workers(_check_batch_in_worker, [batches[n] for n in rest], workers,
                               on_done=lambda n, outcome: done(rest[n], outcome), initializer=_set_worker_job,
                               initargs=(dst, manifest, mode))
    return [one for batch in outcomes for one in batch]


#: About what starting verify's workers costs, in seconds (each is spawned and imports shardkit and
#: its format's library): while the shards left would take less than this here, they are checked
#: here, so a verify that is done sooner (--quick, where a format records counts and identity
#: cheaply) starts none.
WORKER_START_SECONDS = 1.0


def _finish_here(elapsed: float, checked: int, left: int) -> bool:
    """Whether the shards left are checked in this process: at the rate so far they take less
    than starting workers would."""
    return elapsed / max(checked, 1) * left < WORKER_START_SECONDS


#: Shards per verify task at most: few enough to spread a small dataset over the workers, enough
#: that a task's overhead (a round trip to a worker) is small next to its shards' checks.
_BATCH_SHARDS = 256


def _batches(shards: int, workers: int) -> List[Tuple[int, int]]:
    """[start, stop) shard ranges: about four per worker, at most _BATCH_SHARDS shards each."""
    size = max(1, min(_BATCH_SHARDS, -(-shards // (4 * workers))))
    return [(start, min(start + size, shards)) for start in range(0, shards, size)]


_WORKER_JOB: Optional[Tuple[str, Manifest, str]] = None


def _set_worker_job(dst: str, manifest: Manifest, mode: str) -> None:
    global _WORKER_JOB
    _WORKER_JOB = (dst, manifest, mode)


def _check_batch_in_worker(batch: Tuple[int, int]) -> List[Tuple[List[Problem], int]]:
    if _WORKER_JOB is None:
        raise RuntimeError("verify worker used before its initializer ran")
    return _check_batch(*_WORKER_JOB, batch)


def _check_batch(dst: str, manifest: Manifest, mode: str, batch: Tuple[int, int]) -> List[Tuple[List[Problem], int]]:
    """check_shard for each shard of a batch, with the sample table opened once for all of them."""
    table = open_table_rows(dst, manifest, mode)
    try:
        return [check_shard(dst, manifest, number, mode, table) for number in range(*batch)]
    finally:
        if table is not None:
            table.close()


def _unreadable_format(dst: str, manifest: Manifest) -> Optional[Problem]:
    """A format unknown to this shardkit, or a newer version of it: nothing more can be checked."""
    path = Path(dst) / MANIFEST_NAME
    try:
        fmt = get_format(manifest.format_name)
    except UsageError as exc:
        return Problem("manifest", f"{path}: {exc}")
    if manifest.format_version > fmt.version:
        return Problem("manifest", f"{path}: {fmt.name} format version {manifest.format_version} is newer than "
                                   f"this shardkit reads ({fmt.version}); upgrade shardkit")
    try:
        recorded_options(fmt, manifest, dst)
    except ManifestError as exc:
        return Problem("manifest", str(exc))
    return None


def _is_sha256(text: Any) -> bool:
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdefABCDEF" for c in text)


def _unexpected_manifest(dst: str, expected: str) -> List[Problem]:
    """The manifest is not the one the user trusts (its manifest_sha256 differs)."""
    path = Path(dst) / MANIFEST_NAME
    actual = json.loads(path.read_bytes()).get("manifest_sha256")
    if actual == expected:
        return []
    return [Problem("manifest", f"{path}: manifest_sha256 is {actual}, not the expected {expected}: this is not "
                                "the dataset you trust (replaced or tampered with)")]


def _extra_files(dst: str, manifest: Manifest) -> List[Problem]:
    """Files in shards/ that the manifest does not list (temporary files of a conversion included)."""
    listed = set(manifest.shards.paths if manifest.fields is None else manifest.fields.paths())
    shards_dir = Path(dst) / SHARDS_DIR
    if not shards_dir.is_dir():
        return []
    extra = sorted(f"{SHARDS_DIR}/{name}" for name in os.listdir(shards_dir))
    return [Problem("extra", f"{Path(dst) / rel}: not listed in {MANIFEST_NAME}", shard=rel)
            for rel in extra if rel not in listed]


def _sample_table_problems(dst: str, manifest: Manifest, mode: str) -> List[Problem]:
    """The sample table file: a regular file of its recorded size (quick), with its recorded sha256
    (full, deep); each shard's rows in it are compared with the shard by its own check."""
    entry = manifest.sample_table
    if entry is None:
        return []
    try:
        fd = open_table_file(dst, entry)
    except CorruptShardError as exc:
        return [Problem("table", str(exc))]
    try:
        if mode != "quick" and hash_open_file(fd, entry["path"], entry["size"]) != entry["sha256"]:
            return [Problem("table", f"{Path(dst) / entry['path']}: sha256 does not match the manifest "
                                     "(the file's bytes changed)")]
    except (OSError, ValueError) as exc:
        return [Problem("table", f"{Path(dst) / entry['path']}: cannot be hashed ({exc})")]
    finally:
        os.close(fd)
    return []


def _check_batch_isolated(context: Tuple[str, Manifest, str], batch: Tuple[int, int]) -> Any:
    """_check_batch in a child process, as JSON-able data (the parent never unpickles it)."""
    return [_as_json(outcome) for outcome in _check_batch(*context, batch)]


def _check_numbered_shard(context: Tuple[str, Manifest, str], number: int) -> Any:
    """check_shard in a child process, as JSON-able data."""
    dst, manifest, mode = context
    return _as_json(check_shard(dst, manifest, number, mode))


def _as_json(outcome: Tuple[List[Problem], int]) -> Any:
    problems, samples = outcome
    return [[problem.to_dict() for problem in problems], samples]


def _killed_batch(dst: str, manifest: Manifest, mode: str, batch: Tuple[int, int], error: ChildKilled) -> Any:
    """A batch whose checking child died: its shards again, each in a child of its own, to name the one."""
    if batch[1] - batch[0] == 1:
        return [_killed_check(dst, manifest, batch[0], error)]
    outcomes = []
    with IsolatedCalls((dst, manifest, mode)) as calls:
        for number in range(*batch):
            try:
                outcomes.append(calls.call(_check_numbered_shard, number))
            except ChildKilled as exc:
                outcomes.append(_killed_check(dst, manifest, number, exc))
    return outcomes


def _killed_check(dst: str, manifest: Manifest, number: int, error: ChildKilled) -> Any:
    """The outcome of a shard whose check crashed the process checking it (as _check_numbered_shard's)."""
    entry = manifest.shards[number]
    problem = Problem("structure", f"{os.path.join(dst, entry.path)}: the process checking this shard was "
                                   f"{error} (a crafted or badly damaged {manifest.format_name} file)",
                      shard=entry.path)
    return [[problem.to_dict()], 0]
