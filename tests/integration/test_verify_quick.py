"""verify --quick takes each shard's count and identity from its format's peek() (a cheap read
where the format records them), and checks in this process before it starts any worker: the
shards it hands to workers get the same findings, in the same order."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest

import shardkit
from shardkit.ops import verification
from shardkit.formats import get_format
from shardkit.formats.base import ShardFormat
from shardkit.schema import SampleSchema


def _paths(dst: Path) -> List[Path]:
    return [dst / entry["path"] for entry in json.loads((dst / "manifest.json").read_text())["shards"]]


def test_quick_checks_what_peek_reports_without_opening_a_reader(writable_dataset: Path, fmt: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """peek()'s count and dataset_id are what quick compares with the manifest; no reader is opened."""
    if get_format(fmt).crafted_files_crash:
        pytest.skip("its shards are checked in child processes (isolation.py), which a patch here does not reach")
    cls = type(get_format(fmt))
    real_peek = cls.peek
    names = [path.name for path in _paths(writable_dataset)]

    def peek(self: Any, path: str, schema: SampleSchema, options: Any = None,
             fd: Optional[int] = None) -> Tuple[int, Optional[str]]:
        count, dataset_id = real_peek(self, path, schema, options, fd)
        if path.endswith(names[1]):
            return count + 1, dataset_id
        if path.endswith(names[2]):
            return count, "0" * 32
        return count, dataset_id

    def no_reader(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("verify --quick opened a reader")

    monkeypatch.setattr(cls, "peek", peek)
    report = shardkit.verify(str(writable_dataset), mode="quick", workers=1)
    assert [(problem.kind, problem.shard) for problem in report.problems] == \
        [("count", f"shards/{names[1]}"), ("identity", f"shards/{names[2]}")]
    assert "holds 17 samples, manifest says 16" in report.problems[0].message
    monkeypatch.setattr(cls, "peek", ShardFormat.peek)
    monkeypatch.setattr(cls, "open_reader", no_reader)
    with pytest.raises(AssertionError, match="opened a reader"):
        shardkit.verify(str(writable_dataset), mode="quick", workers=1)   # the default peek opens one
    monkeypatch.setattr(cls, "peek", lambda self, path, schema, options=None, fd=None: (16, None))
    assert [p.kind for p in shardkit.verify(str(writable_dataset), mode="quick", workers=1).problems] == \
        ["identity"] * len(names)


def _damaged(writable_dataset: Path, dataset_dir: Path, image_tree: Path, tmp_path: Path, fmt: str) -> Path:
    """The dataset with shard 0 truncated, shard 3 missing and shard 5 taken from another dataset."""
    other = tmp_path / "other"
    shardkit.convert(str(image_tree), str(other), format=fmt, samples_per_shard=16, quiet=True, seed=7,
                     order="shuffled")
    paths = _paths(writable_dataset)
    data = paths[0].read_bytes()
    paths[0].write_bytes(data[:len(data) // 2])
    paths[3].unlink()
    shutil.copyfile(other / "shards" / paths[5].name, paths[5])
    return writable_dataset


@pytest.mark.parametrize("mode", ["quick", "full"])
def test_shards_checked_here_and_in_workers_give_the_same_report(
        writable_dataset: Path, dataset_dir: Path, image_tree: Path, tmp_path: Path, fmt: str, mode: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dst = _damaged(writable_dataset, dataset_dir, image_tree, tmp_path, fmt)
    here = shardkit.verify(str(dst), mode=mode, workers=1)
    kinds = [(problem.kind, problem.shard) for problem in here.problems]
    names = [path.name for path in _paths(dst)]
    assert ("size", f"shards/{names[0]}") in kinds and ("missing", f"shards/{names[3]}") in kinds
    assert ("identity", f"shards/{names[5]}") in kinds
    monkeypatch.setattr(verification, "WORKER_START_SECONDS", 0.0)    # the first batch here, the rest in workers
    split = shardkit.verify(str(dst), mode=mode, workers=2)
    assert split.to_dict() == here.to_dict()


def test_shards_that_check_quickly_here_start_no_worker(writable_dataset: Path, fmt: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """While the shards left would be checked here sooner than workers start, no worker starts.
    (Mutation: always handing the rest to workers after the first batch: this fails.)"""
    if get_format(fmt).crafted_files_crash:
        pytest.skip("its shards are checked in child processes (isolation.py)")

    def no_workers(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("verify started workers")

    monkeypatch.setattr(verification, "run_in_workers", no_workers)
    monkeypatch.setattr(verification, "_BATCH_SHARDS", 1)            # a batch per shard
    monkeypatch.setattr(verification, "WORKER_START_SECONDS", 60.0)
    assert shardkit.verify(str(writable_dataset), mode="quick", workers=2).ok
    monkeypatch.setattr(verification, "WORKER_START_SECONDS", 0.0)
    with pytest.raises(AssertionError, match="started workers"):
        shardkit.verify(str(writable_dataset), mode="quick", workers=2)
