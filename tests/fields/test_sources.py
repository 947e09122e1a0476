"""convert of the sources of named fields: an image tree with sidecar files, and a table with an
image column (paths confined to its folder, or the encoded bytes of a Parquet file)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.errors import UsageError

from .conftest import png_bytes


def sidecar_tree(root: Path, count: int = 9) -> Dict[str, Dict[str, bytes]]:
    """root/<a|b>/NNNN.{png,txt,json,cls}; every fourth sample has no .json. The files by key."""
    files: Dict[str, Dict[str, bytes]] = {}
    for number in range(count):
        key = f"{'ab'[number % 2]}/{number:04d}"
        mine = {"png": png_bytes(number), "txt": f"a caption {number} ✓".encode(),
                "cls": f"{('cat', 'dog', 'emu')[number % 3]}\n".encode()}
        if number % 4:
            mine["json"] = json.dumps({"boxes": [[number, 1, 2, 3]]}).encode()
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        for ext, data in mine.items():
            (root / f"{key}.{ext}").write_bytes(data)
        files[key] = mine
    return files


def test_a_sidecar_tree_becomes_samples_of_named_fields(tmp_path: Path) -> None:
    files = sidecar_tree(tmp_path / "src")
    (tmp_path / "src" / "b" / "0099.txt").write_bytes(b"\xff not utf-8")
    (tmp_path / "src" / "b" / "0099.png").write_bytes(png_bytes(99))
    (tmp_path / "src" / "b" / "0099.cls").write_bytes(b"cat")
    outside = tmp_path / "secret.txt"
    outside.write_text("outside SRC")
    os.symlink(outside, tmp_path / "src" / "a" / "0001.note")
    report = shardkit.convert(str(tmp_path / "src"), str(tmp_path / "ds"), sidecars=True, label_field="cls",
                              samples_per_shard=4)
    assert (report.num_samples, report.skipped) == (9, 2)
    ds = shardkit.open_dataset(tmp_path / "ds", decode=None)
    specs = {spec.name: spec for spec in ds.schema.fields}
    assert {name: (spec.type, spec.optional) for name, spec in specs.items()} == {
        "cls": ("label", False), "json": ("json", True), "png": ("image", False), "txt": ("text", False)}
    assert ds.classes == ["cat", "dog", "emu"]
    assert sorted(ds.key(i) for i in range(9)) == sorted(files)
    for index in range(9):
        sample, want = ds[index], files[ds.key(index)]
        assert sample["png"] == want["png"] and sample["txt"] == want["txt"]
        assert ds.classes[int(sample["cls"][0])] == want["cls"].decode().strip()
        stored = None if "json" not in want else json.dumps(json.loads(want["json"]), separators=(",", ":"))
        assert sample["json"] == (None if stored is None else stored.encode())
    skipped = [json.loads(line) for line in (tmp_path / "ds" / "skipped.jsonl").read_text().splitlines()]
    assert {item["path"] for item in skipped} == {"a/0001.note", "b/0099.txt"}
    assert "outside SRC" in next(item["reason"] for item in skipped if item["path"] == "a/0001.note")
    assert shardkit.verify(str(tmp_path / "ds"), mode="deep").ok


def test_the_order_is_a_seeded_permutation_and_parts_keep_it(tmp_path: Path) -> None:
    sidecar_tree(tmp_path / "src", 12)
    options = {"sidecars": True, "samples_per_shard": 5, "seed": 4}
    shardkit.convert(str(tmp_path / "src"), str(tmp_path / "one"), **options)
    shardkit.convert(str(tmp_path / "src"), str(tmp_path / "sorted"), order="source", **options)
    for index in (0, 1):
        shardkit.convert(str(tmp_path / "src"), str(tmp_path / f"p{index}"), part=f"{index}/2", **options)
    shardkit.merge([str(tmp_path / "p0"), str(tmp_path / "p1")], str(tmp_path / "merged"))

    def keys(name: str) -> list:
        ds = shardkit.open_dataset(tmp_path / name)
        return [ds.key(i) for i in range(len(ds))]
    assert keys("sorted") == sorted(keys("one"), key=lambda key: key.split("/"))
    assert keys("one") != keys("sorted") and keys("merged") == keys("one")


def test_a_table_with_image_paths(tmp_path: Path) -> None:
    (tmp_path / "t" / "img").mkdir(parents=True)
    lines = ["path,label,boxes,score"]
    for number in range(5):
        (tmp_path / "t" / "img" / f"{number}.png").write_bytes(png_bytes(number))
        boxes = json.dumps([[number, 0, 2, 2]]).replace('"', '""')
        lines.append(f'img/{number}.png,{"xy"[number % 2]},"{boxes}",{number / 4}')
    outside = tmp_path / "outside.png"
    outside.write_bytes(png_bytes(9))
    os.symlink(outside, tmp_path / "t" / "img" / "link.png")
    lines += ["../outside.png,x,[],0", f"{outside},x,[],0", "img/link.png,x,[],0", "img/missing.png,y,[],0"]
    (tmp_path / "t" / "labels.csv").write_text("\n".join(lines) + "\n")
    report = shardkit.convert(str(tmp_path / "t" / "labels.csv"), str(tmp_path / "ds"), image_column="path",
                              label_column="label")
    assert (report.num_samples, report.skipped) == (5, 4)
    ds = shardkit.open_dataset(tmp_path / "ds", decode={"image": None})
    assert [spec.type for spec in ds.schema.fields] == ["image", "label", "json", "float"]
    assert [ds[i]["image"] for i in range(5)] == [png_bytes(n) for n in range(5)]
    assert [ds[i]["boxes"] for i in range(5)] == [[[n, 0, 2, 2]] for n in range(5)]
    assert ds.key(2) == "labels.csv:3" and ds.classes == ["x", "y"]
    reasons = [json.loads(line)["reason"] for line in (tmp_path / "ds" / "skipped.jsonl").read_text().splitlines()]
    assert sum("without '..'" in reason for reason in reasons) == 2
    assert any("outside SRC" in reason for reason in reasons) and any("No such file" in r for r in reasons)


def test_parquet_with_encoded_images_as_hugging_face_exports_them(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    images = [{"bytes": png_bytes(n), "path": f"{n}.png"} for n in range(4)]
    table = pa.table({"image": images, "text": [f"t{n}" for n in range(4)],
                      "objects": [{"bbox": [[1.0, 2.0, 3.0, 4.0]] * n, "category": [n] * n} for n in range(4)]})
    pq.write_table(table, tmp_path / "train.parquet")
    (tmp_path / "flat").mkdir()
    pq.write_table(pa.table({"jpg": [png_bytes(7)], "n": [3]}), tmp_path / "flat" / "x.parquet")
    shardkit.convert(str(tmp_path / "train.parquet"), str(tmp_path / "ds"), image_column="image")
    ds = shardkit.open_dataset(tmp_path / "ds", decode={"image": None})
    assert [ds[i]["image"] for i in range(4)] == [png_bytes(n) for n in range(4)]
    assert ds[2]["objects"] == {"bbox": [[1.0, 2.0, 3.0, 4.0]] * 2, "category": [2, 2]}
    shardkit.convert(str(tmp_path / "flat" / "x.parquet"), str(tmp_path / "flat-ds"), image_column="jpg")
    assert shardkit.open_dataset(tmp_path / "flat-ds", decode=None)[0]["image"] == png_bytes(7)


def test_the_cli_takes_the_sources_and_refuses_what_does_not_apply(tmp_path: Path) -> None:
    sidecar_tree(tmp_path / "src", 3)
    runner = CliRunner()
    done = runner.invoke(main, ["convert", str(tmp_path / "src"), str(tmp_path / "ds"), "--sidecars",
                                "--label-field", "cls", "--quiet"])
    assert done.exit_code == 0, done.output
    assert shardkit.open_dataset(tmp_path / "ds").classes == ["cat", "dog", "emu"]
    for args, words in ((["--sidecars", "--no-labels"], "--no-labels does not apply"),
                        (["--sidecars", "--label-field", "nope"], "names no extension"),
                        (["--label-field", "cls"], "--label-field applies to --sidecars"),
                        (["--image-column", "path", "--sidecars"], "contradict")):
        done = runner.invoke(main, ["convert", str(tmp_path / "src"), str(tmp_path / "bad"), *args])
        assert done.exit_code == 2 and words in done.output and "Traceback" not in done.output, done.output
    with pytest.raises(UsageError, match="is not a column"):
        (tmp_path / "t.csv").write_text("a,b\n1,2\n")
        shardkit.convert(str(tmp_path / "t.csv"), str(tmp_path / "t-ds"), image_column="path")
