"""shardkit duplicates over datasets of named fields: a sample is all of its fields, so two samples
are one content only when every field holds the same bytes (and the same presence), within a
dataset and across datasets of the same fields, in every format."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import shardkit

FIELDS = {"text": "text", "vec": {"type": "array", "dtype": "float32", "shape": [None, 2]},
          "note": {"type": "text", "optional": True}}


def _sample(number: int, **changes: object) -> dict:
    sample = {"text": f"t{number}", "vec": np.full((number % 3, 2), number, np.float32), "note": f"n{number}"}
    sample.update(changes)
    return {name: value for name, value in sample.items() if value is not None}


def _groups(report: shardkit.DuplicatesReport) -> list:
    return sorted(sorted((member.dataset, member.key) for member in group.members) for group in report.groups)


def test_samples_equal_in_every_field_are_found_and_no_others(tmp_path: Path, fmt: str) -> None:
    """Samples 1 and 7 are the same in every field; 2 and 8 differ only in vec; 3 and 9 only in that
    9's note is absent where 3's is empty; 4 and 10 differ only in text. Mutations: a digest of the
    first column only; presence left out of the digest."""
    samples = [_sample(number) for number in range(7)]
    samples += [_sample(1), _sample(2, vec=np.ones((2, 2), np.float32)), _sample(3, note="")]
    samples[3]["note"] = ""
    samples[9].pop("note")
    samples += [_sample(4, text="other")]
    shardkit.write(samples, tmp_path / "a", FIELDS, format=fmt, samples_per_shard=4, order="source")
    report = shardkit.duplicates([str(tmp_path / "a")], workers=1)
    assert _groups(report) == [[(0, "1"), (0, "7")]] and report.duplicates == 1 and not report.problems
    assert report.groups[0].members[0].label == -1 and report.groups[0].members[0].class_name is None


def test_a_sample_of_one_dataset_in_another_is_leakage(tmp_path: Path) -> None:
    """The same fields in two datasets (two formats): a sample of the first in the second is a group
    across them; a dataset of other fields holding the same values is no match."""
    shardkit.write([_sample(number) for number in range(6)], tmp_path / "train", FIELDS, format="hdf5")
    shardkit.write([_sample(number) for number in (4, 20, 21)], tmp_path / "val", FIELDS, format="lmdb",
                   order="source")
    other = {"text": "text", "vec": {"type": "array", "dtype": "float32", "shape": [None, 2]}}
    shardkit.write([{"text": "t4", "vec": np.full((1, 2), 4, np.float32)}], tmp_path / "other", other)
    report = shardkit.duplicates([str(tmp_path / "train"), str(tmp_path / "val"), str(tmp_path / "other")],
                                 across=True, workers=1)
    assert _groups(report) == [[(0, "4"), (1, "0")]]
