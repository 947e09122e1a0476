"""Every sample keeps the key of its input: relative path, file:line, or the source key after a
re-shard; ds.key(i), return_key=True, and verify --deep naming a damaged sample by key."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import shardkit
from shardkit.errors import CorruptShardError
from shardkit.formats import get_format

from ..conftest import image_files

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _keys(dst: Path) -> list:
    ds = shardkit.open_dataset(dst, decode=None)
    return [ds.key(index) for index in range(len(ds))]


def test_image_tree_keys_are_relative_paths(image_tree: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / "out"
    shardkit.convert(str(image_tree), str(dst), format=fmt, samples_per_shard=25, order="source", quiet=True)
    files = image_files(image_tree)
    assert _keys(dst) == files
    ds = shardkit.open_dataset(dst, decode=None, return_key=True)
    for index in (0, 57, len(ds) - 1):
        payload, label, key = ds[index]
        assert key == files[index] and ds.classes[label] == key.split("/")[0]
        assert bytes(memoryview(payload)) == (image_tree / key).read_bytes()


def test_unlabeled_and_labels_csv_trees_keep_paths(image_tree: Path, tmp_path: Path, fmt: str) -> None:
    files = image_files(image_tree)
    dst = tmp_path / "unlabeled"
    shardkit.convert(str(image_tree), str(dst), format=fmt, no_labels=True, order="source", quiet=True)
    ds = shardkit.open_dataset(dst, decode=None, return_key=True)
    payload, key = ds[3]
    assert key == files[3] and bytes(memoryview(payload)) == (image_tree / key).read_bytes()
    labels = tmp_path / "labels.csv"
    chosen = files[::7]
    labels.write_text("path,label\n" + "".join(f"{rel},{'even' if n % 2 else 'odd'}\n"
                                               for n, rel in enumerate(chosen)))
    dst = tmp_path / "listed"
    shardkit.convert(str(image_tree), str(dst), format=fmt, labels=str(labels), order="source", quiet=True)
    assert sorted(_keys(dst)) == sorted(chosen)


def test_non_utf8_file_names_keep_their_bytes(tmp_path: Path, fmt: str) -> None:
    src = tmp_path / "src"
    shardkit.samples.make_image_tree(str(src), num_images=4, classes=("a",), seed=3, sizes=(5, 9))
    name = os.fsdecode(b"caf\xe9 \n.png")               # Latin-1 bytes: not UTF-8
    first = sorted((src / "a").iterdir())[0]
    shutil.copyfile(first, src / "a" / name)
    dst = tmp_path / "out"
    shardkit.convert(str(src), str(dst), format=fmt, order="source", quiet=True)
    keys = _keys(dst)
    assert f"a/{name}" in keys
    assert os.fsencode(keys[keys.index(f"a/{name}")]) == b"a/caf\xe9 \n.png"


def _write_table(path: Path, rows: int, text: bool = False) -> list:
    """A CSV whose rows start on known lines (a quoted newline makes some rows take two)."""
    lines = ["x,y,kind" + (",note" if text else "")]
    starts = []
    line = 2
    for row in range(rows):
        starts.append(line)
        note = ""
        if text:
            note = ',"two\nlines"' if row % 5 == 0 else f",n{row}"
        lines.append(f"{row},{row % 7},{'ab'[row % 2]}{note}")
        line += 1 + note.count("\n")
    path.write_text("\n".join(lines) + "\n")
    return starts


@pytest.mark.parametrize("text", [False, True], ids=["numeric", "text-columns"])
def test_csv_rows_are_keyed_by_file_and_line(tmp_path: Path, fmt: str, text: bool) -> None:
    """A table row's key is its file and the line its first line is on (the header is line 1), which
    differs from its number among the rows where a quoted newline makes an earlier row take two lines."""
    src = tmp_path / "tables"
    (src / "sub").mkdir(parents=True)
    first = _write_table(src / "a.csv", 2500, text)          # more than two key blocks of 1024
    second = _write_table(src / "sub" / "b.csv", 40, text)
    dst = tmp_path / "out"
    shardkit.convert(str(src), str(dst), format=fmt, label_column="kind", samples_per_shard=1500, quiet=True)
    assert first[-1] > len(first) + 1 if text else first[-1] == len(first) + 1    # lines and rows differ
    expected = [f"a.csv:{line}" for line in first] + [f"sub/b.csv:{line}" for line in second]
    assert _keys(dst) == expected
    ds = shardkit.open_dataset(dst, decode=None, as_dict=True, return_key=True)
    row = ds[2501]
    assert row["__key__"] == expected[2501] and float(row["x"]) == 1.0
    single = tmp_path / "single"
    shardkit.convert(str(src / "a.csv"), str(single), format=fmt, label_column="kind", quiet=True)
    assert _keys(single)[:3] == [f"a.csv:{line}" for line in first[:3]]


def test_keys_batch_through_a_dataloader(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode="tensor", return_key=True,
                               transform=lambda image: image[:, :2, :2].float())
    images, labels, keys = next(iter(torch.utils.data.DataLoader(ds, batch_size=8)))
    assert images.shape == (8, 3, 2, 2) and list(keys) == [ds.key(index) for index in range(8)]
    assert [ds.classes[label] for label in labels.tolist()] == [key.split("/")[0] for key in keys]


def test_reshard_carries_keys_and_keys_an_old_dataset_by_index(dataset_dir: Path, tmp_path: Path) -> None:
    target = "pt" if shardkit.open_dataset(dataset_dir).manifest.format_name != "pt" else "lmdb"
    shardkit.convert(str(dataset_dir), str(tmp_path / "copy"), format=target, samples_per_shard=33, quiet=True)
    assert _keys(tmp_path / "copy") == _keys(dataset_dir)
    shardkit.convert(str(GOLDEN / "hdf5-v1"), str(tmp_path / "old"), format=target, quiet=True)
    assert _keys(tmp_path / "old") == [f"#{index}" for index in range(8)]


def test_keys_are_read_lazily_and_checked(tmp_path: Path, image_tree: Path, fmt: str) -> None:
    """Damage inside the key data does not stop samples from reading (keys are not read on open),
    and key() then raises CorruptShardError naming the shard instead of returning a wrong key."""
    dst = tmp_path / "out"
    shardkit.convert(str(image_tree), str(dst), format=fmt, samples_per_shard=200, order="source", quiet=True)
    shard = dst / "shards" / f"shard-00000{get_format(fmt).extension}"
    key_data = _key_data(dst)
    data = bytearray(shard.read_bytes())
    at = data.find(key_data)
    assert at > 0 and data.count(key_data) == 1
    data[at + 20] ^= 0xFF
    shard.write_bytes(bytes(data))
    ds = shardkit.open_dataset(dst, decode=None)
    assert bytes(memoryview(ds[5][0])) == (image_tree / image_files(image_tree)[5]).read_bytes()
    with pytest.raises(CorruptShardError, match="shard-00000.*key"):
        ds.key(5)
    ds.close()


def _key_data(dst: Path) -> bytes:
    """The stored key bytes of shard 0, read the way formats/keys.md says (through the format)."""
    reader = get_format(json.loads((dst / "manifest.json").read_text())["format"]["name"]).open_reader(
        str(dst / "shards" / sorted(os.listdir(dst / "shards"))[0]), shardkit.open_dataset(dst).schema)
    reader.key(0)                   # a format may make its key table at the first key()
    table = reader._keys
    data = table._stored_bytes(0, int(table._stored_offsets()[-1]))
    reader.close()
    return data


def test_verify_deep_names_a_damaged_sample_by_key(writable_dataset: Path) -> None:
    ds = shardkit.open_dataset(writable_dataset, decode=None)
    index = 3
    key = ds.key(index)
    payload = bytes(memoryview(ds[index][0]))
    entry = ds.manifest.shards[0]
    ds.close()
    shard = writable_dataset / entry.path
    data = bytearray(shard.read_bytes())
    at = data.find(payload[-64:])
    assert at > 0
    data[at + 10] ^= 0x01
    shard.write_bytes(bytes(data))
    report = shardkit.verify(str(writable_dataset), mode="deep")
    damaged = [problem for problem in report.problems if problem.kind == "sample"]
    assert [(problem.index, problem.key) for problem in damaged] == [(index, key)]
    assert f"key {key!r}" in damaged[0].message
    assert report.to_dict()["problems"][-1]["key"] == key
