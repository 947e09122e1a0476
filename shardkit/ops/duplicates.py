"""duplicates(): samples with the same content within and across datasets ("are any validation
samples in the training set?").

Stored duplicates (always): samples whose stored payloads are the same bytes (and the same layout).
1. Candidates: every sample's stored CRC32 (the sample table's column; no payload is read),
   keyed with its payload layout, in a KeyTable (bounded memory, spilled to disk past it); samples
   whose CRC32 another sample shares are candidates.
2. Groups: each candidate's payload is read and its CRC32 recomputed (a mismatch is reported as
   damage), and its BLAKE2b-128 digest keys a second KeyTable; equal digests form a group.
   A sample whose stored CRC32 is wrong is found only if it happens to be a candidate: damage is
   `shardkit verify --deep`'s job.
Pixel duplicates (pixels=True, image datasets): every image is decoded as
`open_dataset(decode="numpy")` decodes it (EXIF orientation applied, alpha over the recorded
background, RGB) and its pixels digested; a group of equal pixels is reported when its members'
stored bytes are not all the same (the same picture encoded differently).
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..errors import UsageError
from ..records import NO_LABEL
from ..runtime.progress import Progress
from ..runtime.workers import default_workers, exit_if_importing_main
from .key_table import DEFAULT_MEMORY_ROWS, KeyTable
from .sample_digests import (PIXELS, STORED, Digests, close_datasets, payload_digests, run_digests,
                             sample_signature, stored_crcs, tasks_for)

#: A reference packs (dataset number, global index): index in the low bits.
_INDEX_BITS = 40
_INDEX_MASK = (1 << _INDEX_BITS) - 1
#: CRC32s keyed at a time (bounds the temporary arrays of a huge dataset).
_CRC_BLOCK = 1 << 20


@dataclass
class Member:
    """One sample of a group: which dataset (its number and path), index, key, label and class."""

    dataset: int
    dst: str
    index: int
    key: Optional[str]
    label: int
    class_name: Optional[str]

    def to_dict(self) -> Dict[str, Any]:
        return {"dataset": self.dataset, "dst": self.dst, "index": self.index, "key": self.key,
                "label": self.label, "class": self.class_name}


@dataclass
class DuplicateGroup:
    """Samples of the same content: "stored" (identical stored bytes) or "pixels" (the same
    decoded picture, stored differently)."""

    match: str
    members: List[Member]

    @property
    def across(self) -> bool:
        """Whether the group has samples of more than one dataset."""
        return len({member.dataset for member in self.members}) > 1

    def to_dict(self) -> Dict[str, Any]:
        return {"match": self.match, "across": self.across, "members": [m.to_dict() for m in self.members]}


@dataclass
class DuplicatesReport:
    """Outcome of duplicates(); ok when no group (and no damaged sample) was found."""

    datasets: List[str]
    samples: List[int]
    pixels: bool
    across_only: bool
    groups: List[DuplicateGroup] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.groups and not self.problems

    @property
    def duplicates(self) -> int:
        """Samples beyond the first of each group: what dropping the copies would remove."""
        return sum(len(group.members) - 1 for group in self.groups)

    def to_dict(self) -> Dict[str, Any]:
        return {"datasets": self.datasets, "samples": self.samples, "pixels": self.pixels,
                "across_only": self.across_only, "ok": self.ok, "duplicates": self.duplicates,
                "groups": [group.to_dict() for group in self.groups], "problems": self.problems}


def duplicates(dsts: Sequence[str], pixels: bool = False, across: bool = False, workers: Optional[int] = None,
               quiet: bool = True, memory_rows: int = DEFAULT_MEMORY_ROWS) -> DuplicatesReport:
    """Groups of samples with the same content within and across the datasets at dsts.

    Args:
        dsts: one or more dataset folders.
        pixels: also compare decoded images (image datasets only; decodes every image).
        across: report only groups with samples of more than one dataset (leakage between splits).
        workers: processes reading and hashing samples (default: workers.default_workers()).
        quiet: no progress bars.
        memory_rows: hash rows (24 bytes each) kept in memory before spilling to a temporary folder.
    """
    exit_if_importing_main()
    from ..read.dataset import open_dataset
    dsts = [os.fspath(dst) for dst in dsts]
    workers = default_workers() if workers is None else int(workers)
    if not dsts or workers < 1:
        raise UsageError("duplicates needs at least one dataset and at least one worker")
    seen: Dict[str, str] = {}
    for dst in dsts:
        if seen.setdefault(os.path.realpath(dst), dst) != dst or dsts.count(dst) > 1:
            raise UsageError("is given twice (each dataset is compared with itself already)", path=dst)
    datasets = [open_dataset(dst, decode=None) for dst in dsts]
    for dst, ds in zip(dsts, datasets):
        if pixels and ds.manifest.fields is not None:
            raise UsageError("--pixels compares the images of datasets of one image per sample; this one holds "
                             "samples of named fields (compared by their stored bytes)", path=dst)
        if pixels and ds.manifest.schema.kind != "image":
            raise UsageError("--pixels compares images; this dataset holds table rows", path=dst)
    report = DuplicatesReport(dsts, [len(ds) for ds in datasets], pixels, across)
    try:
        found = [("stored", refs) for refs in _stored_groups(dsts, datasets, workers, quiet, memory_rows,
                                                             report.problems)]
        if pixels:
            found += [("pixels", refs) for refs in _pixel_groups(dsts, datasets, workers, quiet, memory_rows,
                                                                 report.problems)]
        found.sort(key=lambda item: (int(item[1][0]), item[0]))
        described = _described([refs for _, refs in found], dsts, datasets)
        report.groups = [DuplicateGroup(match, members) for (match, _), members in zip(found, described)]
    finally:
        close_datasets()
        for ds in datasets:
            ds.close()
    if across:
        report.groups = [group for group in report.groups if group.across]
    return report


def _stored_groups(dsts: List[str], datasets: List[Any], workers: int, quiet: bool, memory_rows: int,
                   problems: List[str]) -> List[np.ndarray]:
    """Groups (refs) of identical stored payloads: CRC32 candidates, then their digests."""
    total = sum(len(ds) for ds in datasets)
    candidates = [np.zeros(len(ds), dtype=bool) for ds in datasets]
    with KeyTable(total, memory_rows) as table, Progress(total, "duplicates: stored CRC32s", quiet=quiet) as bar:
        for number, ds in enumerate(datasets):
            layout = np.uint64(zlib.crc32(sample_signature(ds))) << np.uint64(32)
            crcs = stored_crcs(ds)
            for start in range(0, len(crcs), _CRC_BLOCK):
                block = crcs[start:start + _CRC_BLOCK].astype(np.uint64)
                table.add(layout | block, np.zeros(len(block), dtype=np.uint64),
                          _refs(number, np.arange(start, start + len(block), dtype=np.int64)))
            bar.advance(len(ds))
        held: List[np.ndarray] = []
        for refs in table.groups():
            held.append(refs)
            if len(held) >= 4096:
                _mark(candidates, np.concatenate(held))
                held = []
        if held:
            _mark(candidates, np.concatenate(held))
    wanted = [np.flatnonzero(mask) for mask in candidates]
    tasks = [task for number, dst in enumerate(dsts) for task in tasks_for(dst, number, wanted[number], STORED)]
    return _digest_groups(tasks, workers, quiet, memory_rows, problems, "duplicates: candidate bytes")


def _pixel_groups(dsts: List[str], datasets: List[Any], workers: int, quiet: bool, memory_rows: int,
                  problems: List[str]) -> List[np.ndarray]:
    """Groups (refs) of equal decoded pixels whose stored bytes are not all the same."""
    tasks = [task for number, (dst, ds) in enumerate(zip(dsts, datasets))
             for task in tasks_for(dst, number, np.arange(len(ds), dtype=np.int64), PIXELS)]
    groups = []
    for refs in _digest_groups(tasks, workers, quiet, memory_rows, problems, "duplicates: decoded pixels"):
        stored = set()
        for number in np.unique(refs >> _INDEX_BITS).tolist():
            digests = payload_digests(dsts[number], (refs[(refs >> _INDEX_BITS) == number] & _INDEX_MASK).tolist())
            if digests is not None:
                stored |= set(zip(digests.k1.tolist(), digests.k2.tolist()))
        if len(stored) > 1:
            groups.append(refs)
    return groups


def _digest_groups(tasks: list, workers: int, quiet: bool, memory_rows: int, problems: List[str],
                   title: str) -> List[np.ndarray]:
    """The groups (refs) of equal digests over every task's samples."""
    total = sum(len(task.indices) for task in tasks)
    with KeyTable(total, memory_rows) as table, Progress(total, title, quiet=quiet) as bar:
        def done(digests: Digests) -> None:
            table.add(digests.k1, digests.k2, _refs(digests.dataset, digests.indices))
            problems.extend(digests.problems)
            bar.advance(len(digests.indices) + len(digests.problems))
        run_digests(tasks, workers, done)
        return list(table.groups())


def _mark(masks: List[np.ndarray], refs: np.ndarray) -> None:
    """Set each referenced sample in its dataset's mask."""
    numbers = refs >> _INDEX_BITS
    for number in np.unique(numbers).tolist():
        masks[number][refs[numbers == number] & _INDEX_MASK] = True


def _refs(dataset: int, indices: np.ndarray) -> np.ndarray:
    return (np.int64(dataset) << np.int64(_INDEX_BITS)) | indices.astype(np.int64)


def _described(groups: List[np.ndarray], dsts: List[str], datasets: List[Any]) -> List[List[Member]]:
    """Each group's samples with their keys, labels and class names: keys looked up in index
    order (a shard's block of keys is read once for its neighbours), labels from targets()."""
    refs = np.unique(np.concatenate(groups)) if groups else np.zeros(0, dtype=np.int64)
    labels: Dict[int, np.ndarray] = {}
    members: Dict[int, Member] = {}
    for ref in refs.tolist():
        number, index = ref >> _INDEX_BITS, ref & _INDEX_MASK
        ds = datasets[number]
        if number not in labels:        # a sample of named fields has no one label
            labels[number] = ds.targets() if ds.manifest.fields is None else np.full(len(ds), NO_LABEL)
        label, classes = int(labels[number][index]), ds.classes
        members[ref] = Member(number, dsts[number], index, ds.key(index), label,
                              classes[label] if 0 <= label < len(classes) else None)
    return [[members[ref] for ref in group.tolist()] for group in groups]


__all__ = ["DuplicateGroup", "DuplicatesReport", "Member", "duplicates"]
