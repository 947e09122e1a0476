"""Which samples a re-shard keeps: chosen classes (--classes), a file of keys (--keys), a seeded
fraction of each class (--fraction, by --seed). Every filter given must hold; the kept samples keep
their stored order.

Classes: with --classes the new dataset has exactly those classes, in the old label order,
relabelled 0..k-1 (what converting a tree of only those class folders gives); otherwise it keeps
every old class and label, even a class left with no sample, so that labels mean the same in the
subset as in the whole (a model or metric of the whole applies to it).

The fraction: within each class (or among all samples, unlabeled), the samples that pass the other
filters are ranked by a seeded key of their index and the first round(F * n) kept (halves up). The
ranking does not depend on F, so for one seed a smaller fraction keeps a subset of a larger one.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..errors import UsageError
from ..order import seed_key, splitmix64

#: Mixed into the fraction's seed, so its ranking differs from the shuffled order of the same --seed.
_FRACTION = 0xF2AC7


@dataclass(frozen=True)
class Selection:
    """The samples kept (old indices, ascending), the new class names, the old label -> new label
    map (None when labels stay), and the record of the filters for the manifest's source summary."""

    kept: np.ndarray
    classes: List[str]
    relabel: Optional[np.ndarray]
    record: Dict[str, Any]


def select(classes: Sequence[str], labels: Callable[[], np.ndarray], keys: Callable[[], List[str]],
           wanted_classes: Optional[Sequence[str]], keys_file: Optional[str], fraction: Optional[float],
           seed: Optional[int], src: str) -> Optional[Selection]:
    """The samples of a dataset (its class names; its labels and keys, read only when a filter needs
    them) that the filters keep, or None when no filter is given (keep all)."""
    if wanted_classes is None and keys_file is None and fraction is None:
        return None
    all_labels = labels()
    keep = np.ones(len(all_labels), dtype=bool)
    record: Dict[str, Any] = {}
    new_classes, relabel = list(classes), None
    if wanted_classes is not None:
        new_classes, relabel = _classes(classes, wanted_classes, src)
        keep &= (all_labels >= 0) & (relabel[np.clip(all_labels, 0, None)] >= 0)
        record["classes"] = new_classes
    if keys_file is not None:
        wanted, digest = read_keys_file(keys_file)
        keep &= _keyed(keys(), wanted, keys_file)
        record.update({"keys": len(set(wanted)), "keys_sha256": digest})
    if fraction is not None:
        keep &= _fraction(all_labels, keep, fraction, seed or 0)
        record.update({"fraction": fraction, "seed": seed or 0})
    return Selection(np.flatnonzero(keep).astype(np.int64), new_classes, relabel, record)


def _classes(classes: Sequence[str], wanted: Sequence[str], src: str) -> "tuple[List[str], np.ndarray]":
    """The kept class names in old label order, and old label -> new label (-1: dropped)."""
    if not classes:
        raise UsageError("--classes needs a dataset with class names; this one has none", path=src)
    unknown = [name for name in wanted if name not in classes]
    if unknown:
        known = ", ".join(list(classes)[:10]) + (" ..." if len(classes) > 10 else "")
        raise UsageError(f"--classes names {', '.join(map(repr, unknown))}, not a class of this dataset "
                         f"(classes: {known})", path=src)
    kept = [name for name in classes if name in set(wanted)]
    relabel = np.full(len(classes), -1, dtype=np.int64)
    for new, name in enumerate(kept):
        relabel[list(classes).index(name)] = new
    return kept, relabel


def read_keys_file(path: str) -> "tuple[List[str], str]":
    """The keys of a --keys file, one per line (UTF-8; a final newline and CRLF endings allowed,
    empty lines skipped), and the file's sha256; UsageError naming the file when it cannot be
    read or names no key."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read the --keys file ({exc.strerror or exc})", path=path) from None
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    keys = [line[:-1] if line.endswith("\r") else line for line in lines if line not in ("", "\r")]
    if not keys:
        raise UsageError("the --keys file names no key", path=path)
    return keys, hashlib.sha256(data).hexdigest()


def _keyed(keys: List[str], wanted: List[str], keys_file: str) -> np.ndarray:
    """Which samples (by their keys) the file names; UsageError for a key of the file no sample has."""
    present = set(keys)
    missing = [key for key in dict.fromkeys(wanted) if key not in present]
    if missing:
        raise UsageError(f"{len(missing)} key(s) of the file are not in the dataset, first {missing[0]!r}",
                         path=keys_file)
    chosen = set(wanted)
    return np.fromiter((key in chosen for key in keys), dtype=bool, count=len(keys))


def _fraction(labels: np.ndarray, candidates: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """Of the candidates of each label, the round(fraction * n) that rank first by a seeded key."""
    with np.errstate(over="ignore"):
        rank = splitmix64(np.arange(len(labels), dtype=np.uint64) + np.uint64(seed_key((seed, _FRACTION))))
    keep = np.zeros(len(labels), dtype=bool)
    for label in np.unique(labels[candidates]).tolist():
        members = np.flatnonzero(candidates & (labels == label))
        count = math.floor(fraction * len(members) + 0.5)
        keep[members[np.argsort(rank[members], kind="stable")[:count]]] = True
    return keep
