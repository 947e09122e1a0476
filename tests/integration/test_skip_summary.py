"""What a conversion leaves out is visible: the summary line and the manifest count skipped inputs
by reason and ignored files by extension, and skipped.jsonl lists at most MAX_PER_REASON inputs
per reason, then one line counting the rest (also after a --part I/N merge)."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.samples import make_image_tree

#: Inputs listed per reason in skipped.jsonl, as docs/converting.md states.
MAX_PER_REASON = 1000

NOT_A_NUMBER = "column 'x': … is not a number"
RAGGED = "row has N fields, the header has N"


def _lines(dst: Path) -> List[Dict]:
    return [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]


def _table(path: Path, bad: int, ragged: int, good: int) -> Path:
    """A CSV whose column x is declared float: `bad` rows hold a word in it, `ragged` rows lack a field."""
    rows = [f"{index % 3},{'oops' if index < bad else index},{index % 2}" for index in range(bad + good)]
    for index in range(ragged):
        rows.insert(7 + index * 11, "1,2")
    path.write_text("a,x,kind\n" + "\n".join(rows) + "\n")
    return path


def test_skipped_list_is_capped_per_reason_and_counted(tmp_path: Path) -> None:
    bad = MAX_PER_REASON + 1600
    src = _table(tmp_path / "t.csv", bad=bad, ragged=5, good=400)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": [{"name": "x", "type": "float"}]}))
    dst = tmp_path / "dst"
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "--label-column", "kind", "--schema",
                                       str(schema), "--quiet"])
    assert result.exit_code == 0, result.output
    assert (f"skipped {bad + 5:,} ({bad:,} {NOT_A_NUMBER}, 5 {RAGGED}; see skipped.jsonl)"
            in result.output), result.output
    lines = _lines(dst)
    listed = [line for line in lines if "path" in line]
    assert len(listed) == MAX_PER_REASON + 5 and lines[-1] == {"omitted": bad - MAX_PER_REASON,
                                                               "reason": NOT_A_NUMBER}
    words = [line["line"] for line in listed if "is not a number" in line["reason"]]
    assert words == sorted(words) and len(words) == MAX_PER_REASON     # the first ones, in file order
    assert (dst / "skipped.jsonl").stat().st_size < 200 * (MAX_PER_REASON + 6)
    summary = shardkit.open_dataset(dst).manifest.source["summary"]
    assert summary["skipped"] == bad + 5 and summary["skipped_by_reason"] == {NOT_A_NUMBER: bad, RAGGED: 5}
    report = shardkit.convert(str(src), str(tmp_path / "again"), label_column="kind", schema_file=str(schema))
    assert report.skipped == bad + 5 and report.skipped_by_reason == summary["skipped_by_reason"]


def test_merged_parts_list_what_one_run_lists_past_the_cap(tmp_path: Path) -> None:
    """Scan skips (broken links) and write skips (empty images) both past the cap, cut into parts."""
    src = tmp_path / "src"
    make_image_tree(str(src), num_images=30, classes=("a", "b"), seed=3, sizes=(8, 12))
    for index in range(MAX_PER_REASON + 5):
        os.symlink(f"missing-{index}", src / "a" / f"broken-{index:05d}.png")
    for index in range(MAX_PER_REASON + 200):
        (src / "b" / f"empty-{index:05d}.png").write_bytes(b"")
    single = tmp_path / "single"
    shardkit.convert(str(src), str(single), samples_per_shard=150, quiet=True)     # shuffled: good ones in every part
    parts = [tmp_path / f"part{index}" for index in range(3)]
    for index, part in enumerate(parts):
        shardkit.convert(str(src), str(part), samples_per_shard=150, part=f"{index}/3", quiet=True)
    merged = tmp_path / "merged"
    shardkit.merge([str(part) for part in parts], str(merged))
    one = shardkit.open_dataset(single).manifest.source["summary"]
    assert one["skipped"] == 2 * MAX_PER_REASON + 205
    assert shardkit.open_dataset(merged).manifest.source["summary"] == one
    assert (merged / "skipped.jsonl").read_bytes() == (single / "skipped.jsonl").read_bytes()
    lines = _lines(single)
    assert len(lines) == 2 * MAX_PER_REASON + 2
    assert {line["reason"]: line["omitted"] for line in lines if "omitted" in line} == {
        "broken symbolic link": 5, "empty file": 200}


def _copy_real_files(pattern: str, folder: Path, count: int) -> int:
    """Copies of up to `count` files of /usr/share matching pattern (real data); how many."""
    found = sorted(Path("/usr/share").rglob(pattern))[:count] if Path("/usr/share").is_dir() else []
    folder.mkdir(parents=True, exist_ok=True)
    for index, path in enumerate(found):
        shutil.copyfile(path, folder / f"{index:03d}-{path.name}")
    return len(found)


def test_ignored_files_are_counted_by_extension(tmp_path: Path) -> None:
    src = tmp_path / "stamps"
    pngs = _copy_real_files("*.png", src / "animals", 6)
    svgs = _copy_real_files("*.svg", src / "animals", 4)
    texts = _copy_real_files("*.txt", src / "plants", 3)
    if not (pngs and svgs and texts):
        pytest.skip("/usr/share has no PNG, SVG or .txt file to build the tree from")
    (src / "plants" / "README").write_text("no extension")
    make_image_tree(str(src), num_images=4, classes=("plants",), seed=2, sizes=(8, 12))
    dst = tmp_path / "dst"
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "--quiet"])
    assert result.exit_code == 0, result.output
    ignored = svgs + texts + 1
    expected = dict(sorted({".svg": svgs, ".txt": texts, "(none)": 1}.items(), key=lambda kv: (-kv[1], kv[0])))
    words = ", ".join(f"{count} {name}" for name, count in expected.items())
    assert f"; ignored {ignored} other files ({words})" in result.output, result.output
    summary = shardkit.open_dataset(dst).manifest.source["summary"]
    assert summary["other_files"] == ignored and summary["other_files_by_extension"] == expected


def test_extension_counts_are_bounded(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_image_tree(str(src), num_images=3, classes=("a",), seed=4, sizes=(8, 12))
    for index in range(30):
        (src / "a" / f"note.x{index:02d}").write_text("x" * (index % 3))
    (src / "a" / "two.x00").write_text("")
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), quiet=True)
    counts = shardkit.open_dataset(dst).manifest.source["summary"]["other_files_by_extension"]
    assert len(counts) == 21 and counts[".x00"] == 2 and counts["(other)"] == 10     # 20 kept, 10 summed
    assert sum(counts.values()) == 31
