"""--order shuffled (default) / source and --seed: a seeded permutation of the planned items,
recorded in the manifest, byte-identical for any --workers and with --part/merge."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.order import seeded_permutation

from ..conftest import files_in_dataset_order, image_files


def _digests(dst: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((dst / "shards").iterdir())}


def _labels(dst: Path) -> list:
    return shardkit.open_dataset(dst, decode=None).targets().tolist()


def test_default_order_is_a_seeded_shuffle_recorded_in_the_manifest(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "default"
    shardkit.convert(str(image_tree), str(dst), samples_per_shard=16, quiet=True)
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["order"] == {"kind": "shuffled", "seed": 0}
    files = image_files(image_tree)
    stored = files_in_dataset_order(image_tree, dst)
    assert stored == [files[i] for i in seeded_permutation(len(files), 0)] and stored != files
    ds = shardkit.open_dataset(dst, decode=None)
    assert all(bytes(memoryview(ds[i][0])) == (image_tree / rel).read_bytes() for i, rel in enumerate(stored))
    # every shard mixes classes (a sorted tree puts one class in a shard of 16)
    labels = np.asarray(_labels(dst))
    assert all(len(set(labels[start:start + 16])) >= 3 for start in range(0, 112, 16))


def test_source_order_keeps_sorted_paths(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "source"
    shardkit.convert(str(image_tree), str(dst), samples_per_shard=16, order="source", quiet=True)
    assert json.loads((dst / "manifest.json").read_text())["order"] == {"kind": "source"}
    assert files_in_dataset_order(image_tree, dst) == image_files(image_tree)
    assert _labels(dst) == sorted(_labels(dst))


def test_seeds_give_different_orders_and_the_same_seed_the_same_bytes(image_tree: Path, tmp_path: Path) -> None:
    runs = {}
    for name, seed, workers in (("a", 5, 1), ("b", 5, 2), ("c", 6, 1)):
        dst = tmp_path / name
        shardkit.convert(str(image_tree), str(dst), format="pt", samples_per_shard=25, seed=seed,
                         workers=workers, quiet=True)
        runs[name] = _digests(dst)
    assert runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]


def test_shard_size_in_bytes_cuts_the_shuffled_items(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "bysize"
    shardkit.convert(str(image_tree), str(dst), format="pt", shard_size="300KB", seed=3, quiet=True)
    stored = files_in_dataset_order(image_tree, dst)
    manifest = shardkit.open_dataset(dst).manifest
    for entry in manifest.shards:
        items = stored[entry.first_index:entry.first_index + entry.num_samples]
        assert sum((image_tree / rel).stat().st_size for rel in items) <= 300_000 or len(items) == 1


def test_parts_merge_equal_the_single_shuffled_run(image_tree: Path, tmp_path: Path) -> None:
    single = tmp_path / "single"
    shardkit.convert(str(image_tree), str(single), format="lmdb", samples_per_shard=10, seed=9, quiet=True)
    parts = []
    for index in range(2):
        part = tmp_path / f"part{index}"
        shardkit.convert(str(image_tree), str(part), format="lmdb", samples_per_shard=10, seed=9,
                         part=f"{index}/2", workers=2, quiet=True)
        parts.append(str(part))
    merged = tmp_path / "merged"
    assert CliRunner().invoke(main, ["merge", *parts, str(merged)]).exit_code == 0
    assert _digests(merged) == _digests(single)
    assert shardkit.open_dataset(merged).manifest.order == {"kind": "shuffled", "seed": 9}


def test_parts_with_different_seeds_do_not_merge(image_tree: Path, tmp_path: Path) -> None:
    parts = []
    for index, seed in ((0, 1), (1, 2)):
        part = tmp_path / f"part{index}"
        shardkit.convert(str(image_tree), str(part), samples_per_shard=40, seed=seed, part=f"{index}/2", quiet=True)
        parts.append(str(part))
    result = CliRunner().invoke(main, ["merge", *parts, str(tmp_path / "merged")])
    assert result.exit_code == 2 and "different conversion" in result.output


def test_resume_refuses_another_seed(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "done"
    shardkit.convert(str(image_tree), str(dst), samples_per_shard=40, seed=1, quiet=True)
    assert shardkit.convert(str(image_tree), str(dst), samples_per_shard=40, seed=1, resume=True).shards_reused == 3
    with pytest.raises(shardkit.UsageError, match="other input or options"):
        shardkit.convert(str(image_tree), str(dst), samples_per_shard=40, seed=2, resume=True)


@pytest.mark.parametrize("args, message", [
    (["--order", "random"], "Invalid value for '--order'"),
    (["--order", "source", "--seed", "3"], "--seed applies to --order shuffled only"),
    (["--seed", "-1"], "--seed must be between"),
])
def test_order_usage_errors(image_tree: Path, tmp_path: Path, args: list, message: str) -> None:
    result = CliRunner().invoke(main, ["convert", str(image_tree), str(tmp_path / "out"), "-q", *args])
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def _write_csv(path: Path, rows: int) -> Path:
    path.write_text("x,label\n" + "".join(f"{i},{i % 7}\n" for i in range(rows)))
    return path


def test_csv_defaults_to_file_order_and_shuffles_on_request(tmp_path: Path) -> None:
    src = _write_csv(tmp_path / "t.csv", 300)
    plain, shuffled, again = tmp_path / "plain", tmp_path / "shuffled", tmp_path / "again"
    shardkit.convert(str(src), str(plain), label_column="label", samples_per_shard=50, quiet=True)
    assert json.loads((plain / "manifest.json").read_text())["order"] == {"kind": "source"}
    rows = [float(x[0]) for x, _ in shardkit.open_dataset(plain)]
    assert rows == list(range(300))
    for dst, workers in ((shuffled, 1), (again, 2)):
        shardkit.convert(str(src), str(dst), label_column="label", samples_per_shard=50, order="shuffled",
                         seed=4, workers=workers, quiet=True)
    assert _digests(shuffled) == _digests(again)
    ds = shardkit.open_dataset(shuffled)
    assert [int(x[0]) for x, _ in ds] == seeded_permutation(300, 4).tolist()
    assert [y for _, y in ds] == [i % 7 for i in seeded_permutation(300, 4).tolist()]


def test_reshard_keeps_index_order_unless_asked(dataset_dir: Path, tmp_path: Path) -> None:
    kept, shuffled = tmp_path / "kept", tmp_path / "shuffled"
    shardkit.convert(str(dataset_dir), str(kept), format="pt", samples_per_shard=30, quiet=True)
    shardkit.convert(str(dataset_dir), str(shuffled), format="pt", samples_per_shard=30, order="shuffled",
                     seed=2, quiet=True)
    source = shardkit.open_dataset(dataset_dir, decode=None)
    payloads = [bytes(memoryview(source[i][0])) for i in range(len(source))]
    first, second = shardkit.open_dataset(kept, decode=None), shardkit.open_dataset(shuffled, decode=None)
    assert [bytes(memoryview(first[i][0])) for i in range(len(first))] == payloads
    assert [bytes(memoryview(second[i][0])) for i in range(len(second))] == \
        [payloads[i] for i in seeded_permutation(len(payloads), 2)]


def test_older_manifests_without_order_read_as_source_order() -> None:
    golden = Path(__file__).resolve().parents[1] / "golden"
    for dst in sorted(golden.glob("*-v1")):
        manifest = shardkit.open_dataset(dst).manifest
        assert manifest.order is None and "order" not in json.loads((dst / "manifest.json").read_text())


def test_interrupted_shuffled_conversion_resumes_byte_identical(image_tree: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped at a bad image in its last shuffled shard, resumed, equals an uninterrupted run."""
    import shutil
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    tree = tmp_path / "tree"
    shutil.copytree(image_tree, tree)
    files = image_files(tree)
    last = files[seeded_permutation(len(files), 11)[-1]]
    (tree / last).write_bytes(b"not an image")
    options = dict(format="hdf5", samples_per_shard=16, seed=11, quiet=True)
    with pytest.raises(shardkit.ConversionError, match="--on-error fail"):
        shardkit.convert(str(tree), str(tmp_path / "stopped"), on_error="fail", **options)
    assert not (tmp_path / "stopped" / "manifest.json").exists()
    report = shardkit.convert(str(tree), str(tmp_path / "stopped"), resume=True, **options)
    assert report.shards_reused == 7 and report.skipped == 1
    shardkit.convert(str(tree), str(tmp_path / "whole"), **options)
    assert _digests(tmp_path / "stopped") == _digests(tmp_path / "whole")
    assert (tmp_path / "stopped" / "manifest.json").read_bytes() == (tmp_path / "whole" / "manifest.json").read_bytes()


def test_info_shows_the_order(dataset_dir: Path) -> None:
    result = CliRunner().invoke(main, ["info", str(dataset_dir)])
    assert result.exit_code == 0 and "order        shuffled (seed 0)" in result.output
    data = json.loads(CliRunner().invoke(main, ["info", str(dataset_dir), "--json"]).output)
    assert data["order"] == {"kind": "shuffled", "seed": 0}
