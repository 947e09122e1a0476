"""repair and convert --append of datasets of named fields converted from files: a sidecar tree
(--sidecars) and a table with an image column (--image-column). Repaired files are the originals
byte for byte; an append keeps the old files' bytes, skips inputs already in DST and refuses one
whose key DST holds with other content."""
from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import shardkit
from shardkit.errors import ConversionError, UsageError

from .conftest import png_bytes
from .test_sources import sidecar_tree

FORMATS = ["hdf5", "lmdb", "pt"]


def image_table(folder: Path, numbers: range, label: str = "xyz") -> Path:
    """folder/labels.csv: a row per number (its image under img/, a label, a caption)."""
    (folder / "img").mkdir(parents=True, exist_ok=True)
    lines = ["path,label,caption"]
    for number in numbers:
        (folder / "img" / f"{number}.png").write_bytes(png_bytes(number))
        lines.append(f"img/{number}.png,{label[number % len(label)]},caption {number}")
    (folder / "labels.csv").write_text("\n".join(lines) + "\n")
    return folder / "labels.csv"


def converted(tmp_path: Path, kind: str, fmt: str, count: int = 14) -> Tuple[Path, Path, Dict[str, Any]]:
    """(SRC, DST, the options) of a dataset of fields converted from a source of this kind."""
    if kind == "sidecars":
        sidecar_tree(tmp_path / "src", count)
        src, options = tmp_path / "src", {"sidecars": True, "label_field": "cls"}
    else:
        src, options = image_table(tmp_path / "src", range(count)), {"image_column": "path", "label_column": "label"}
    dst = tmp_path / "dst"
    shardkit.convert(src, dst, format=fmt, samples_per_shard=4, **options)
    return src, dst, options


def digests(dst: Path) -> Dict[str, str]:
    """sha256 of every file below DST/shards."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in (dst / "shards").iterdir()}


def shard_files(dst: Path, number: int) -> List[Path]:
    return sorted((dst / "shards").glob(f"shard-{number:05d}.*"))


def everything(dst: Path) -> Dict[str, bytes]:
    return {str(path.relative_to(dst)): path.read_bytes() for path in sorted(dst.rglob("*")) if path.is_file()}


def flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def change_input(src: Path, kind: str, key: str) -> None:
    """Give the input of `key` other content (its caption)."""
    if kind == "sidecars":
        (src / f"{key}.txt").write_bytes(b"another caption")
        return
    row = int(key.rsplit(":", 1)[1])
    lines = src.read_text().splitlines()
    lines[row] = lines[row].rsplit(",", 1)[0] + ",another caption"
    src.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["sidecars", "table"])
def test_repair_writes_a_deleted_and_a_flipped_shard_again_byte_identical(tmp_path: Path, kind: str, fmt: str) -> None:
    src, dst, _ = converted(tmp_path, kind, fmt)
    original = digests(dst)
    table = next(dst.glob("sample_table.*.bin"), None)
    for path in shard_files(dst, 1):
        path.unlink()                                   # a lost shard: every file of it
    flip_a_bit(shard_files(dst, 3)[-1])                 # a flipped bit in one file of another
    if table is not None:
        table.unlink()
    assert not shardkit.verify(dst).ok
    report = shardkit.repair(dst, src)
    assert report.shards_written == 2 and len(report.repaired) == len(shard_files(dst, 1)) + 1 + (table is not None)
    assert digests(dst) == original
    assert shardkit.verify(dst, mode="deep").ok
    assert not (dst / ".shardkit").exists()             # the staging folder is gone
    assert shardkit.repair(dst, src).shards_written == 0


@pytest.mark.parametrize("kind", ["sidecars", "table"])
def test_repair_refuses_a_src_that_changed_and_leaves_dst_as_it_was(tmp_path: Path, kind: str) -> None:
    src, dst, _ = converted(tmp_path, kind, "hdf5")
    with shardkit.open_dataset(dst) as ds:
        key = ds.key(ds.manifest.shards[1].first_index)
    shard_files(dst, 1)[0].unlink()
    before = everything(dst)
    change_input(src, kind, key)
    with pytest.raises(ConversionError, match=rf"shard 1 \(shards/shard-00001\..*\) cannot be rebuilt from SRC"
                       rf".*changed (or moved )?in SRC: '{key}'"):
        shardkit.repair(dst, src)
    assert everything(dst) == before


def test_repair_of_a_part_of_a_merged_dataset_of_parts_and_of_a_tar_of_sidecars(tmp_path: Path) -> None:
    sidecar_tree(tmp_path / "src", 20)
    options = {"sidecars": True, "samples_per_shard": 3}
    for index in (0, 1):
        shardkit.convert(tmp_path / "src", tmp_path / f"p{index}", part=f"{index}/2", format="pt", **options)
    shardkit.merge([str(tmp_path / "p0"), str(tmp_path / "p1")], str(tmp_path / "merged"))
    with tarfile.open(tmp_path / "src.tar", "w") as tar:
        for path in sorted((tmp_path / "src").rglob("*")):
            tar.add(path, arcname=str(path.relative_to(tmp_path / "src")), recursive=False)
    shardkit.convert(tmp_path / "src.tar", tmp_path / "tar", **options)
    for name, src, lost in (("p1", "src", "part-00001-shard-00002"), ("merged", "src", "part-00000-shard-00001"),
                            ("merged", "src", "part-00001-shard-00003"), ("tar", "src.tar", "shard-00004")):
        dst = tmp_path / name
        original = digests(dst)
        for path in (dst / "shards").glob(f"{lost}.*"):
            path.unlink()
        assert shardkit.repair(dst, tmp_path / src).shards_written == 1
        assert digests(dst) == original


def new_inputs(tmp_path: Path, kind: str, count: int) -> Path:
    """NEW_SRC: SRC's inputs again (unchanged) and 5 new ones, one of a new class."""
    if kind == "sidecars":
        new = tmp_path / "new"
        shutil.copytree(tmp_path / "src", new)
        for number in range(5):
            (new / "c").mkdir(exist_ok=True)
            (new / "c" / f"{number:04d}.png").write_bytes(png_bytes(900 + number))
            (new / "c" / f"{number:04d}.txt").write_bytes(f"new {number}".encode())
            (new / "c" / f"{number:04d}.cls").write_bytes(b"zebra" if number == 2 else b"dog")
        return new
    return image_table(tmp_path / "new", range(count + 5), label="xyz" * (count // 3 + 1) + "wxxyy")


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb"])
@pytest.mark.parametrize("kind", ["sidecars", "table"])
def test_append_adds_new_samples_keeps_old_bytes_and_skips_what_dst_holds(tmp_path: Path, kind: str,
                                                                          fmt: str) -> None:
    src, dst, _ = converted(tmp_path, kind, fmt)
    old_digests, old_manifest = digests(dst), json.loads((dst / "manifest.json").read_text())
    old = shardkit.open_dataset(dst, decode=None)
    old_samples = [(old.key(index), old[index]) for index in range(len(old))]
    old.close()                     # its manifest (classes, length) is still read below
    new = new_inputs(tmp_path, kind, 14)
    report = shardkit.convert(new, dst, append=True)
    assert report.warnings == ["14 inputs already in DST (same key and content) were skipped"]
    ds = shardkit.open_dataset(dst, decode=None)
    assert len(ds) == 19 and report.num_samples == 19
    assert {name: digest for name, digest in digests(dst).items() if name in old_digests} == old_digests
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["shards"][:len(old_manifest["shards"])] == old_manifest["shards"]
    for table in old_manifest.get("sample_tables", {}).values():     # a reader of the old manifest keeps its tables
        assert hashlib.sha256((dst / table["path"]).read_bytes()).hexdigest() == table["sha256"]
    assert set(manifest.get("sample_tables", {})) == set(old_manifest.get("sample_tables", {}))
    assert ds.classes[:len(old.classes)] == old.classes and ds.classes[len(old.classes):] == [
        "zebra" if kind == "sidecars" else "w"]
    assert [(ds.key(index), ds[index]) for index in range(len(old))] == old_samples    # labels never change
    fresh = sorted(ds.key(index) for index in range(len(old), len(ds)))
    assert fresh == ([f"c/{number:04d}" for number in range(5)] if kind == "sidecars"
                     else [f"labels.csv:{row}" for row in range(15, 20)])
    ds.close()
    assert shardkit.verify(dst, mode="deep").ok
    again = shardkit.convert(new, dst, append=True)
    assert "nothing new to append" in again.warnings and len(shardkit.open_dataset(dst)) == 19
    appended = list(manifest["shards"])[len(old_manifest["shards"]):]
    for item in appended[0]["files"].values():
        (dst / item["path"]).unlink()                   # an appended shard lost: rebuilt from NEW_SRC
    with pytest.raises(UsageError, match="was appended from"):
        shardkit.repair(dst, src)
    after_append = digests(dst)
    shard_files(dst, 1)[0].unlink()                     # and an old one: keys of the shards before the append
    shardkit.repair(dst, [src, new])
    assert digests(dst) == {**after_append, **{Path(item["path"]).name: item["sha256"]
                                               for item in appended[0]["files"].values()}}


@pytest.mark.parametrize("kind", ["sidecars", "table"])
def test_append_refuses_an_input_dst_holds_with_other_content(tmp_path: Path, kind: str) -> None:
    _, dst, _ = converted(tmp_path, kind, "hdf5")
    new = new_inputs(tmp_path, kind, 14)
    with shardkit.open_dataset(dst) as ds:
        key = ds.key(5)
    change_input(new, kind, key)
    before = everything(dst)
    with pytest.raises(ConversionError, match=f"'{key}' is already in DST .* with other content"):
        shardkit.convert(new, dst, append=True)
    assert everything(dst) == before


def test_append_refuses_inputs_of_other_fields_and_options(tmp_path: Path) -> None:
    _, dst, _ = converted(tmp_path, "sidecars", "hdf5")
    new = tmp_path / "other"
    (new / "d").mkdir(parents=True)
    (new / "d" / "0001.png").write_bytes(png_bytes(5))
    (new / "d" / "0001.cls").write_bytes(b"cat")
    (new / "d" / "0001.note").write_bytes(b"a field the dataset has not")
    before = everything(dst)
    with pytest.raises(UsageError, match="field 'note' .* is not a field of the dataset"):
        shardkit.convert(new, dst, append=True)
    with pytest.raises(UsageError, match="--samples-per-shard 5 conflicts with the dataset"):
        shardkit.convert(new, dst, append=True, samples_per_shard=5)
    (new / "d" / "0001.note").unlink()
    with pytest.raises(UsageError, match="has no 'txt' field, which every sample of the dataset holds"):
        shardkit.convert(new, dst, append=True)
    assert everything(dst) == before


def test_a_copy_of_a_dataset_of_fields_is_refused_naming_what_it_is(tmp_path: Path) -> None:
    src, dst, _ = converted(tmp_path, "sidecars", "hdf5")
    shardkit.convert(dst, tmp_path / "copy", format="lmdb")
    for call in (lambda: shardkit.repair(tmp_path / "copy", src),
                 lambda: shardkit.convert(src, tmp_path / "copy", append=True)):
        with pytest.raises(UsageError, match="copied from another one .* has no files to replay"):
            call()


def test_the_manifest_records_the_options_that_decide_the_bytes(tmp_path: Path) -> None:
    _, dst, _ = converted(tmp_path, "table", "lmdb")
    recorded = json.loads((dst / "manifest.json").read_text())["source"]["options"]
    assert recorded == {"format": "lmdb", "image_column": "path", "label_column": "label", "order": "source",
                        "samples_per_shard": 4, "seed": 0}
