"""verify --quick takes each shard's count and identity from its format's peek() (a cheap read
where the format records them), and checks in this process before it starts any worker: the
shards it hands to workers get the same findings, in the same order."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, List

import pytest

import shardkit
from shardkit.ops import verification
from shardkit.formats import get_format


def _paths(dst: Path) -> List[Path]:
    return [dst / entry["path"] for entry in json.loads((dst / "manifest.json").read_text())["shards"]]


OTHER_ID = "f" * 32


def _edit_hdf5(paths: List[Path]) -> None:
    """Shard 1: its locator's dataset_id edited, the locator's CRC32 right, its metadata CRC32 not
    the file's (a locator that does not describe the file: h5py is asked). Shard 2: the HDF5
    dataset_id attribute changed with h5py, the locator left saying the old one. Shard 3: the
    locator's dataset_id edited and every CRC32 made right (a locator that describes the file)."""
    import h5py
    from tests.formats.test_hdf5_locator import rewrite_locator

    def stale(locator: Any) -> None:
        locator.dataset_id, locator.meta_crc32 = OTHER_ID, locator.meta_crc32 ^ 1
    rewrite_locator(paths[1], stale, fix_meta=False)
    with h5py.File(paths[2], "r+") as handle:
        handle.attrs["dataset_id"] = OTHER_ID
    rewrite_locator(paths[3], lambda locator: setattr(locator, "dataset_id", OTHER_ID))


def _edit_pt(paths: List[Path]) -> None:
    """As for HDF5, in the archive comment's locator: shard 1's locator claims another dataset_id
    with its own CRC32 right and its metadata CRC32 wrong; shard 3's with every CRC32 right."""
    from tests.formats.test_pt_locator import rewrite_locator
    rewrite_locator(paths[1], lambda locator: locator.fields.update(dataset_id=OTHER_ID), meta_flip=1)
    rewrite_locator(paths[3], lambda locator: locator.fields.update(dataset_id=OTHER_ID))


def _edit_lmdb(paths: List[Path]) -> None:
    """Shard 1's metadata record claims one more sample, shard 2's is not JSON, shard 3's names
    another dataset_id."""
    import lmdb
    from shardkit.formats.lmdb_layout import META_KEY

    def edit(path: Path, change: Any) -> None:
        env = lmdb.open(str(path), subdir=False, lock=False, map_size=path.stat().st_size + (1 << 20))
        with env.begin(write=True) as txn:
            txn.put(META_KEY, change(bytes(txn.get(META_KEY))))
        env.sync(True)
        env.close()

    def meta(**fields: Any) -> Any:
        return lambda raw: json.dumps(dict(json.loads(raw), **fields)).encode()
    edit(paths[1], lambda raw: meta(num_samples=json.loads(raw)["num_samples"] + 1)(raw))
    edit(paths[2], lambda raw: b"{not json" + raw[9:])
    edit(paths[3], meta(dataset_id=OTHER_ID))


#: For each format: how its shards 1-3 are crafted, and what --quick must report of them.
CRAFTED = {
    "hdf5": (_edit_hdf5, [("identity", 2), ("identity", 3)]),
    "pt": (_edit_pt, [("identity", 3)]),
    "lmdb": (_edit_lmdb, [("count", 1), ("structure", 2), ("identity", 3)]),
}


def test_quick_trusts_a_shard_record_only_while_it_describes_the_file(writable_dataset: Path, fmt: str) -> None:
    """verify --quick takes count and identity from the record a format keeps of them (the
    locator, LMDB's metadata record), never from a locator whose metadata CRC32 no longer matches
    the file (a shard changed with h5py or torch after it was written): the format library is
    asked then. Real crafted shards, resealed so that only these records differ.
    Mutations: hdf5_reader.located or pt_reader.located returning a locator without `describes`
    (shard 1 reports an identity it does not have; HDF5 shard 2 hides its real one);
    lmdb_reader.peek taking the count from anything but the metadata record."""
    from tests.faults.crafting import reseal
    edit, expected = CRAFTED[fmt]
    paths = _paths(writable_dataset)
    edit(paths)
    reseal(writable_dataset)
    report = shardkit.verify(str(writable_dataset), mode="quick", workers=1)
    names = [path.name for path in paths]
    assert [(problem.kind, problem.shard) for problem in report.problems] == \
        [(kind, f"shards/{names[number]}") for kind, number in expected], report.problems
    if fmt == "lmdb":
        assert "holds 17 samples, manifest says 16" in report.problems[0].message
    assert all(OTHER_ID in problem.message for problem in report.problems if problem.kind == "identity")
    # what a reader (verify's default) says of the same shards: the locators' claims are not the files'
    full = shardkit.verify(str(writable_dataset), mode="full", workers=1)
    assert ("identity", f"shards/{names[1]}") not in [(problem.kind, problem.shard) for problem in full.problems]


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
