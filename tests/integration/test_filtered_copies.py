"""Re-sharding a dataset into a filtered copy: --classes (relabelled 0..k-1), --keys FILE, a seeded
--fraction of each class; every kept record carried over as stored (payload, CRC32, key)."""
from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main


def _records(dst: Path) -> Dict[str, Tuple[bytes, str, int]]:
    """key -> (stored payload, class name, CRC32), read with the dataset's own reader."""
    ds = shardkit.open_dataset(dst, decode=None)
    out = {}
    for index in range(len(ds)):
        encoded = ds.read_encoded(index)
        out[ds.key(index)] = (bytes(memoryview(encoded.payload)), ds.classes[encoded.label], encoded.crc32)
    return out


def _keys_in_order(dst: Path) -> List[str]:
    ds = shardkit.open_dataset(dst, decode=None)
    return [ds.key(index) for index in range(len(ds))]


def _convert(*args: str) -> "tuple[int, str]":
    result = CliRunner().invoke(main, ["convert", *args, "--quiet"])
    return result.exit_code, result.output


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_classes_keeps_those_relabelled_in_their_old_order(dataset_dir: Path, tmp_path: Path) -> None:
    old = _records(dataset_dir)
    code, output = _convert(str(dataset_dir), str(tmp_path / "new"), "--classes", "triangle,circle",
                            "--format", "lmdb", "--samples-per-shard", "7")
    assert code == 0, output
    new = shardkit.open_dataset(tmp_path / "new", decode=None)
    assert new.classes == ["circle", "triangle"]                   # the old label order, not the option's
    assert sorted(set(new.targets().tolist())) == [0, 1]
    expected = {key: record for key, record in old.items() if record[1] in ("circle", "triangle")}
    assert _records(tmp_path / "new") == expected                   # bytes, class names, CRC32s and keys carried
    assert _keys_in_order(tmp_path / "new") == [key for key in _keys_in_order(dataset_dir) if key in expected]
    counts = new.manifest.source["summary"]["samples_per_class"]
    assert counts == {name: sum(1 for r in expected.values() if r[1] == name) for name in ("circle", "triangle")}
    assert shardkit.verify(str(tmp_path / "new"), mode="deep").ok


@pytest.mark.parametrize("fmt", ["pt"])
def test_keys_file_keeps_exactly_those_and_every_class(dataset_dir: Path, tmp_path: Path) -> None:
    keys = _keys_in_order(dataset_dir)
    chosen = [key for key in keys if key.startswith("square/")][:3] + keys[::17]
    (tmp_path / "keys.txt").write_bytes(("\r\n".join(reversed(chosen)) + "\r\n\r\n").encode())   # CRLF, blank line
    code, output = _convert(str(dataset_dir), str(tmp_path / "new"), "--keys", str(tmp_path / "keys.txt"))
    assert code == 0, output
    new = shardkit.open_dataset(tmp_path / "new", decode=None)
    assert _keys_in_order(tmp_path / "new") == [key for key in keys if key in set(chosen)]   # stored order kept
    assert new.classes == shardkit.open_dataset(dataset_dir).classes      # the label space is kept whole
    old = _records(dataset_dir)
    assert _records(tmp_path / "new") == {key: old[key] for key in chosen}


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_a_key_not_in_the_dataset_is_refused_and_nothing_written(dataset_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "keys.txt").write_text(f"{_keys_in_order(dataset_dir)[0]}\nno/such.jpg\n")
    code, output = _convert(str(dataset_dir), str(tmp_path / "new"), "--keys", str(tmp_path / "keys.txt"))
    assert code == 2 and "keys.txt: 1 key(s) of the file are not in the dataset, first 'no/such.jpg'" in output
    assert not (tmp_path / "new" / "manifest.json").exists()


def _per_class(dst: Path) -> Dict[str, List[str]]:
    ds = shardkit.open_dataset(dst, decode=None)
    labels = ds.targets().tolist()
    out: Dict[str, List[str]] = collections.defaultdict(list)
    for index, label in enumerate(labels):
        out[ds.classes[label]].append(ds.key(index))
    return out


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_fraction_is_per_class_seeded_nested_and_reproducible(dataset_dir: Path, tmp_path: Path) -> None:
    whole = _per_class(dataset_dir)
    runs = {}
    # 30 samples a class: 0.25 and 0.55 of it are 7.5 and 16.5, rounded half up
    for name, fraction, seed in (("a", "0.25", "5"), ("b", "0.25", "5"), ("c", "0.25", "6"), ("d", "0.55", "5")):
        code, output = _convert(str(dataset_dir), str(tmp_path / name), "--fraction", fraction, "--seed", seed)
        assert code == 0, output
        runs[name] = _per_class(tmp_path / name)
    for name, keys in whole.items():
        assert len(keys) == 30
        assert len(runs["a"][name]) == 8 and len(runs["d"][name]) == 17        # each class's own share
        assert set(runs["a"][name]) <= set(keys)
        assert set(runs["a"][name]) <= set(runs["d"][name])                     # a smaller fraction nests
    assert runs["a"] == runs["b"] and runs["a"] != runs["c"]
    shards = sorted((tmp_path / "a" / "shards").iterdir())
    assert [path.read_bytes() for path in shards] == \
        [(tmp_path / "b" / "shards" / path.name).read_bytes() for path in shards]    # byte-identical reruns
    summary = json.loads((tmp_path / "a" / "manifest.json").read_text())["source"]["summary"]
    assert summary["selection"] == {"fraction": 0.25, "seed": 5} and summary["source_samples"] == 120
    code, output = _convert(str(dataset_dir), str(tmp_path / "a"), "--fraction", "0.25", "--seed", "6", "--resume")
    assert code == 2 and "made from other input or options" in output       # the selection is part of the plan


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_filters_combine_and_bad_values_are_usage_errors(dataset_dir: Path, image_tree: Path, tmp_path: Path) -> None:
    code, output = _convert(str(dataset_dir), str(tmp_path / "both"), "--classes", "stripes", "--fraction", "0.5")
    assert code == 0, output
    both = _per_class(tmp_path / "both")
    assert list(both) == ["stripes"] and len(both["stripes"]) == 15               # half of its 30
    for args, message in ((["--fraction", "0"], "--fraction must be above 0"),
                          (["--fraction", "1.5"], "--fraction must be above 0"),
                          (["--classes", "circle,nope"], "'nope', not a class of this dataset"),
                          (["--seed", "3"], "--seed applies to --order shuffled only")):
        code, output = _convert(str(dataset_dir), str(tmp_path / "bad"), *args)
        assert code == 2 and message in output, (args, output)
    code, output = _convert(str(image_tree), str(tmp_path / "tree"), "--classes", "circle")
    assert code == 2 and "--classes does not apply to an image tree" in output
    assert not (tmp_path / "bad").exists() and not (tmp_path / "tree").exists()


def test_a_dataset_from_before_keys_and_sample_tables_filters_by_its_index_keys(tmp_path: Path) -> None:
    """LMDB format version 1 (no stored keys, no sample table): labels come from each shard, and a
    sample's key is "#" and its index, as a plain copy names it."""
    golden = Path(__file__).resolve().parents[1] / "golden" / "lmdb-v1-tabular"
    old = shardkit.open_dataset(golden)
    (tmp_path / "keys.txt").write_text("#0\n#3\n#8\n")
    code, output = _convert(str(golden), str(tmp_path / "new"), "--keys", str(tmp_path / "keys.txt"),
                            "--classes", "low")
    assert code == 0, output
    new = shardkit.open_dataset(tmp_path / "new")
    wanted = [index for index in (0, 3, 8) if old.classes[int(old.targets()[index])] == "low"]
    assert new.classes == ["low"] and len(new) == len(wanted) > 0
    assert [new.key(index) for index in range(len(new))] == [f"#{index}" for index in wanted]
    for position, index in enumerate(wanted):
        assert new[position][0].tolist() == old[index][0].tolist() and new[position][1] == 0
