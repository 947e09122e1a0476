"""verify(): prove a dataset intact — quick (presence, sizes, counts), full (+ whole-file hashes),
deep (+ every sample's CRC32 and that every image decodes). Reports every problem found."""
from __future__ import annotations

import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .codecs.decode import check_payload_decodes
from .errors import CorruptSampleError, CorruptShardError, ManifestError, SampleError, UsageError
from .formats import SampleChecks, check_size, get_format, open_unchecked, version_problem
from .integrity import hash_file
from .manifest import MANIFEST_NAME, SHARDS_DIR, Manifest, ShardEntry, canonical_bytes, load_manifest
from .progress import Progress

MODES = ("quick", "full", "deep")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset, located as precisely as possible."""

    kind: str                      # manifest | missing | extra | size | count | checksum | structure | sample
    message: str
    shard: Optional[str] = None
    index: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


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


def verify(dst: str, mode: str = "full", workers: int = 1, quiet: bool = True) -> VerifyReport:
    """Check DST against its manifest; NotADatasetError if DST has no manifest at all."""
    if mode not in MODES:
        raise UsageError(f"unknown verify mode {mode!r}; choose quick, full or deep")
    dst = os.fspath(dst)
    report = VerifyReport(dst=dst, mode=mode)
    try:
        manifest = load_manifest(dst)
    except ManifestError as exc:
        report.problems.append(Problem("manifest", str(exc)))
        return report
    unreadable = _unreadable_format(dst, manifest)
    if unreadable is not None:
        report.problems.append(unreadable)
        return report
    report.problems.extend(_edited_bytes(dst))
    report.problems.extend(_extra_files(dst, manifest))
    jobs = [(dst, manifest, number, mode) for number in range(len(manifest.shards))]
    with Progress(len(jobs), f"verify ({mode})", quiet=quiet, unit="shard") as bar:
        if workers > 1 and len(jobs) > 1:
            with ProcessPoolExecutor(workers) as pool:
                outcomes = []
                for outcome in pool.map(_check_shard_job, jobs):
                    outcomes.append(outcome)
                    bar.advance(1, manifest.shards[len(outcomes) - 1].size)
        else:
            outcomes = []
            for job in jobs:
                outcomes.append(_check_shard_job(job))
                bar.advance(1, manifest.shards[len(outcomes) - 1].size)
    for problems, samples in outcomes:
        report.problems.extend(problems)
        report.samples_checked += samples
    report.shards_checked = len(jobs)
    return report


def _unreadable_format(dst: str, manifest: Manifest) -> Optional[Problem]:
    """A format unknown to this shardkit, or a newer version of it: nothing more can be checked."""
    path = Path(dst) / MANIFEST_NAME
    try:
        fmt = get_format(manifest.format_name)
    except UsageError as exc:
        return Problem("manifest", f"{path}: {exc}")
    problem = version_problem(fmt, manifest.format_version)
    return Problem("manifest", f"{path}: {problem}") if problem else None


def _edited_bytes(dst: str) -> List[Problem]:
    """manifest.json's self-checksum covers its content; this catches any other edit (spacing)."""
    path = Path(dst) / MANIFEST_NAME
    raw = path.read_bytes()
    if raw == canonical_bytes(json.loads(raw)):
        return []
    return [Problem("manifest", f"{path}: edited after it was written (its content is intact, but its bytes "
                                "differ from what shardkit wrote)")]


def _extra_files(dst: str, manifest: Manifest) -> List[Problem]:
    """Files in shards/ that the manifest does not list (temporary files of a conversion included)."""
    listed = {entry.path for entry in manifest.shards}
    shards_dir = Path(dst) / SHARDS_DIR
    if not shards_dir.is_dir():
        return []
    extra = sorted(f"{SHARDS_DIR}/{name}" for name in os.listdir(shards_dir))
    return [Problem("extra", f"{Path(dst) / rel}: not listed in {MANIFEST_NAME}", shard=rel)
            for rel in extra if rel not in listed]


def _check_shard_job(job: Tuple[str, Manifest, int, str]) -> Tuple[List[Problem], int]:
    dst, manifest, number, mode = job
    return check_shard(dst, manifest, manifest.shards[number], mode)


def check_shard(dst: str, manifest: Manifest, entry: ShardEntry, mode: str) -> Tuple[List[Problem], int]:
    """Problems found in one shard, and how many samples were checked one by one."""
    path = os.path.join(dst, entry.path)
    problems: List[Problem] = []

    def problem(kind: str, message: str, index: Optional[int] = None) -> None:
        problems.append(Problem(kind, f"{path}: {message}", shard=entry.path, index=index))

    try:
        check_size(path, entry.size, "shard")
    except CorruptShardError as exc:
        missing = not os.path.exists(path)
        problem("missing" if missing else "size", str(exc).replace(f"{path}: ", "", 1))
        if missing:
            return problems, 0
    else:
        if mode in ("full", "deep") and hash_file(path) != entry.sha256:
            problem("checksum", "sha256 does not match the manifest (the file's bytes changed)")
    try:
        reader = open_unchecked(get_format(manifest.format_name), path, manifest.schema, manifest.format_options,
                                "shard")
    except CorruptShardError as exc:
        problem("structure", str(exc).replace(f"{path}: ", "", 1).replace("shard cannot", "cannot", 1))
        return problems, 0
    checks = SampleChecks(len(manifest.classes) if manifest.schema.labeled else 0, verify=True)
    samples = 0
    try:
        if len(reader) != entry.num_samples:
            problem("count", f"holds {len(reader)} samples, manifest says {entry.num_samples}")
        if mode == "deep":
            for index in range(len(reader)):
                samples += 1
                try:
                    encoded = checks.read(reader, path, entry.path, index)
                except CorruptSampleError as exc:
                    problem("sample", str(exc).replace(f"{path}: ", "", 1), index)
                    continue
                try:
                    check_payload_decodes(manifest.schema, encoded.payload)
                except SampleError as exc:
                    problem("sample", f"sample {index} does not decode ({exc})", index)
    finally:
        reader.close()
    return problems, samples
