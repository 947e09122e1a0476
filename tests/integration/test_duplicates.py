"""shardkit duplicates: exact copies within and across datasets, the same picture stored
differently (--pixels), what is not found (lossy re-encodes, resizes), damaged candidates,
table rows, the CLI's table, --json and exit codes."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Set, Tuple

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import shardkit
from shardkit.cli import main
from shardkit.samples import make_image_tree


def _files(root: Path, suffix: str) -> List[Path]:
    return sorted(path for path in root.rglob(f"*{suffix}"))


@pytest.fixture(scope="module")
def splits(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, object]:
    """A train tree (with one copy inside it) and a val tree built from some of its pictures:
    exact copies, lossless re-encodes, a lossy re-encode, a resize and a new picture."""
    root = tmp_path_factory.mktemp("dups")
    train, val = root / "train", root / "val"
    make_image_tree(str(train), num_images=16, sizes=(16, 40), seed=8, jpeg_fraction=0.5)
    jpegs, pngs = _files(train, ".jpg"), _files(train, ".png")
    shutil.copy(jpegs[0], train / "circle" / "copy-inside.jpg")                 # stored duplicate within train
    (val / "cat").mkdir(parents=True)
    shutil.copy(jpegs[1], val / "cat" / "exact.jpg")                             # stored duplicates across
    shutil.copy(pngs[0], val / "cat" / "exact.png")
    with Image.open(jpegs[2]) as image:                                          # JPEG pixels kept in a PNG
        image.save(val / "cat" / "from-jpeg.png")
    with Image.open(pngs[1]) as image:                                           # PNG re-saved, other bytes
        image.save(val / "cat" / "resaved.png", compress_level=1)
    with Image.open(jpegs[3]) as image:                                          # lossy: not the same picture
        image.convert("RGB").save(val / "cat" / "lossy.jpg", quality=40)
    with Image.open(pngs[2]) as image:                                           # resized: not the same picture
        image.resize((image.width * 2, image.height * 2)).save(val / "cat" / "resized.png")
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(
        val / "cat" / "new.png")
    for tree in (train, val):
        shardkit.convert(str(tree), str(root / f"{tree.name}-dst"), samples_per_shard=5, quiet=True)
    assert (val / "cat" / "resaved.png").read_bytes() != pngs[1].read_bytes()
    rel = {path: path.relative_to(train).as_posix() for path in [*jpegs, *pngs]}
    return {"train": root / "train-dst", "val": root / "val-dst", "root": root,
            "inside": {rel[jpegs[0]], "circle/copy-inside.jpg"},
            "stored": [{("val", "cat/exact.jpg"), ("train", rel[jpegs[1]])},
                       {("val", "cat/exact.png"), ("train", rel[pngs[0]])}],
            "pixels": [{("val", "cat/from-jpeg.png"), ("train", rel[jpegs[2]])},
                       {("val", "cat/resaved.png"), ("train", rel[pngs[1]])}]}


def _sets(report: shardkit.DuplicatesReport, match: str) -> List[Set[Tuple[str, str]]]:
    names = {str(path): Path(path).name.replace("-dst", "") for path in report.datasets}
    return [{(names[m.dst], m.key) for m in group.members} for group in report.groups if group.match == match]


def test_exact_copies_across_datasets_and_within_one(splits) -> None:
    report = shardkit.duplicates([splits["val"], splits["train"]])
    across = [group for group in _sets(report, "stored") if len({name for name, _ in group}) > 1]
    inside = [group for group in _sets(report, "stored") if len({name for name, _ in group}) == 1]
    assert sorted(map(sorted, across)) == sorted(map(sorted, splits["stored"]))
    assert inside == [{("train", key) for key in splits["inside"]}]
    assert not _sets(report, "pixels") and not report.problems and report.duplicates == 3
    only_across = shardkit.duplicates([splits["val"], splits["train"]], across=True)
    assert sorted(map(sorted, _sets(only_across, "stored"))) == sorted(map(sorted, splits["stored"]))


def test_pixels_find_the_same_picture_stored_differently_and_nothing_else(splits) -> None:
    report = shardkit.duplicates([splits["val"], splits["train"]], pixels=True, across=True)
    assert sorted(map(sorted, _sets(report, "pixels"))) == sorted(map(sorted, splits["pixels"]))
    found = {key for group in report.groups for _, key in ((m.dst, m.key) for m in group.members)}
    assert not found & {"cat/lossy.jpg", "cat/resized.png", "cat/new.png"}
    member = report.groups[0].members[0]
    assert member.class_name == "cat" and member.label == 0 and member.index >= 0


def test_a_damaged_candidate_is_reported_and_left_out(splits, tmp_path: Path) -> None:
    """A flipped byte inside a copied picture: its stored CRC32 still pairs it with the original,
    reading it shows the damage (named), and it joins no group."""
    val = tmp_path / "val"
    shutil.copytree(splits["val"], val)
    payload = (Path(splits["root"]) / "val" / "cat" / "exact.jpg").read_bytes()
    for shard in sorted((val / "shards").iterdir()):
        data = bytearray(shard.read_bytes())
        at = data.find(payload)
        if at >= 0:
            data[at + len(payload) // 2] ^= 0x10
            shard.write_bytes(bytes(data))
            break
    else:
        pytest.fail("the copied picture's bytes are not in any shard")
    report = shardkit.duplicates([val, splits["train"]], across=True)
    assert len(report.problems) == 1 and "cat/exact.jpg" in report.problems[0] and "CRC32" in report.problems[0]
    assert [sorted(key for _, key in group) for group in _sets(report, "stored")] == \
        [sorted(key for _, key in group) for group in splits["stored"][1:]]
    assert not report.ok


def test_identical_table_rows_are_duplicates(tmp_path: Path) -> None:
    rows = ["a,b,label", "1.5,2,x", "3,4,y", "1.5,2.0,y", "5,6,x", "3,4,x"]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    shardkit.convert(str(tmp_path / "t.csv"), str(tmp_path / "t"), label_column="label", quiet=True)
    report = shardkit.duplicates([tmp_path / "t"])
    assert sorted(sorted(m.index for m in group.members) for group in report.groups) == [[0, 2], [1, 4]]
    with pytest.raises(shardkit.UsageError, match="table rows"):
        shardkit.duplicates([tmp_path / "t"], pixels=True)


def test_cli_table_json_and_exit_codes(splits, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["duplicates", str(splits["val"]), str(splits["train"]), "--across", "-q"])
    assert result.exit_code == 1
    assert "identical stored bytes: 2 samples across datasets" in result.output
    assert "cat/exact.png" in result.output and result.output.rstrip().endswith("(2 groups across datasets)")
    result = runner.invoke(main, ["duplicates", str(splits["val"]), str(splits["train"]), "--json", "--pixels"])
    data = json.loads(result.output)
    assert result.exit_code == 1 and data["version"] == 1 and not data["ok"]
    assert sorted(group["match"] for group in data["groups"]) == ["pixels", "pixels", "stored", "stored", "stored"]
    lone = tmp_path / "lone"
    shutil.copytree(splits["val"], lone)
    result = runner.invoke(main, ["duplicates", str(lone), "-q"])
    assert result.exit_code == 0 and "no duplicates" in result.output
    for args, message in (([str(tmp_path / "missing")], "missing"), ([str(lone), str(lone)], "given twice")):
        result = runner.invoke(main, ["duplicates", *args, "-q"])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_bounded_memory_spills_and_finds_the_same_groups(splits) -> None:
    """Four hash rows in memory: every table spills to bucket files, and the groups are the same."""
    spilled = shardkit.duplicates([splits["val"], splits["train"]], pixels=True, memory_rows=4)
    whole = shardkit.duplicates([splits["val"], splits["train"]], pixels=True)
    assert spilled.to_dict() == whole.to_dict() and len(whole.groups) == 5
