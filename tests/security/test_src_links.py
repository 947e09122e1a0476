"""Symbolic links in SRC never pull outside files into a dataset: links that leave SRC are skipped
and listed (not read, not walked), links that stay inside SRC are followed, and a link swapped in
after the scan is not followed out of SRC when the file is read."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

import shardkit
from shardkit.options import RunOptions
from shardkit.samples import make_image_tree
from shardkit.sources import open_source
from shardkit.sources.base import Converted, ConvertedRun, Skipped


def _outside(tmp_path: Path) -> Path:
    """A folder beside SRC holding a real PNG (from /usr/share when there is one)."""
    outside = tmp_path / "outside"
    make_image_tree(str(outside / "gen"), num_images=1, classes=("x",), seed=5)
    pngs = sorted(Path("/usr/share").rglob("*.png"))[:1] if Path("/usr/share").is_dir() else []
    source = pngs[0] if pngs else next((outside / "gen").rglob("*.*"))
    shutil.copyfile(source, outside / "secret.png")
    return outside


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    make_image_tree(str(src), num_images=6, classes=("cat", "dog"), seed=1, sizes=(8, 16))
    return src


def _skipped(dst: Path) -> Dict[str, str]:
    lines = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    return {line["path"]: line["reason"] for line in lines if "path" in line}


def _payloads(dst: Path) -> List[bytes]:
    ds = shardkit.open_dataset(dst, decode=None)
    return [bytes(memoryview(ds[index][0])) for index in range(len(ds))]


def test_links_out_of_src_are_skipped_and_listed_not_read(tmp_path: Path) -> None:
    src, outside = _tree(tmp_path), _outside(tmp_path)
    os.symlink(outside / "secret.png", src / "cat" / "secret.png")       # a file link out
    os.symlink("/etc/passwd", src / "cat" / "passwd.png")                # one to a system file
    os.symlink(outside, src / "dog" / "more")                            # a folder link out
    os.symlink(outside, src / "elsewhere")                               # one that would be a class
    dst = tmp_path / "dst"
    report = shardkit.convert(str(src), str(dst), order="source", quiet=True)
    assert report.num_samples == 6
    assert (outside / "secret.png").read_bytes() not in _payloads(dst)
    skipped = _skipped(dst)
    assert set(skipped) == {"cat/secret.png", "cat/passwd.png", "dog/more", "elsewhere"}
    assert all("outside SRC" in reason and "not followed" in reason for reason in skipped.values())
    assert "'/etc/passwd'" in skipped["cat/passwd.png"]
    manifest = shardkit.open_dataset(dst).manifest
    assert manifest.classes == ["cat", "dog"]
    assert manifest.source["summary"]["links_outside_src"] == 4


def test_links_out_stop_on_error_fail_before_any_shard(tmp_path: Path) -> None:
    src, outside = _tree(tmp_path), _outside(tmp_path)
    os.symlink(outside, src / "cat" / "more")
    with pytest.raises(shardkit.ConversionError, match=r"cat/more: symbolic link to a folder outside SRC"):
        shardkit.convert(str(src), str(tmp_path / "dst"), on_error="fail", quiet=True)
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_links_inside_src_are_followed(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    real = sorted((src / "dog").rglob("*.*"))[0]
    os.symlink(os.path.relpath(real, src / "cat"), src / "cat" / ("alias" + real.suffix))    # a file link inside
    (src / "z").mkdir()
    shutil.copyfile(real, src / "z" / ("only" + real.suffix))
    os.symlink("z", src / "a")                                            # a folder link inside, walked first
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), no_labels=True, order="source", quiet=True)
    ds = shardkit.open_dataset(dst, decode=None)
    keys = [ds.key(index) for index in range(len(ds))]
    assert "cat/alias" + real.suffix in keys and "a/only" + real.suffix in keys
    assert "z/only" + real.suffix not in keys              # the same folder is walked once
    assert _skipped(dst) == {}


def test_labels_csv_paths_out_of_src_are_skipped(tmp_path: Path) -> None:
    src, outside = _tree(tmp_path), _outside(tmp_path)
    os.symlink(outside / "secret.png", src / "cat" / "secret.png")
    os.symlink(outside, src / "linked")
    os.symlink(outside, src / "linked2")
    good = sorted(str(path.relative_to(src)) for path in src.rglob("*") if path.is_file() and not path.is_symlink())
    bad = ["../outside/secret.png", str(outside / "secret.png"), "cat/secret.png", "linked/secret.png",
           str(src / "linked2" / "secret.png"), "cat/../../outside/secret.png"]
    labels = tmp_path / "labels.csv"
    labels.write_text("path,label\n" + "".join(f"{path},a\n" for path in good + bad))
    dst = tmp_path / "dst"
    report = shardkit.convert(str(src), str(dst), labels=str(labels), quiet=True)
    assert report.num_samples == len(good) and report.skipped == len(bad)
    assert (outside / "secret.png").read_bytes() not in _payloads(dst)
    reasons = {json.loads(line).get("line", json.loads(line)["path"]): json.loads(line)["reason"]
               for line in (dst / "skipped.jsonl").read_text().splitlines()}
    assert all("outside SRC" in reason for reason in reasons.values()), reasons
    through_links = [reason for reason in reasons.values() if "symbolic link" in reason]
    assert len(through_links) == 3          # found by the scan, not first opened and refused


def test_a_link_swapped_in_after_the_scan_is_not_followed_out(tmp_path: Path) -> None:
    """The files are replaced between the scan and the reads (a fixed point, not a timed race): a
    file by a link out of SRC, a folder by a link to an outside folder holding the same name, a
    link into SRC by one out of it, and a file by another file."""
    src, outside = _tree(tmp_path), _outside(tmp_path)
    files = sorted(path for path in src.rglob("*.*"))
    (src / "sub").mkdir()
    shutil.copyfile(files[0], src / "sub" / "secret.png")
    alias = src / "cat" / "alias.png"
    os.symlink(files[4], alias)
    source = open_source(str(src), {"no_labels": True}, RunOptions(workers=1))
    keys = list(source.paths)
    victim, replaced = files[1], files[2]
    victim.unlink()
    os.symlink(outside / "secret.png", victim)
    shutil.rmtree(src / "sub")
    os.symlink(outside, src / "sub")
    alias.unlink()
    os.symlink(outside / "secret.png", alias)
    shutil.copyfile(files[3], tmp_path / "new")           # made before the old one goes: another inode
    os.replace(tmp_path / "new", replaced)
    outcomes = _by_key(source.encode_range(0, len(keys)), keys)
    secret = (outside / "secret.png").read_bytes()
    assert all(payload != secret for payload in outcomes.values() if isinstance(payload, bytes))
    swapped = (victim, src / "sub" / "secret.png", alias, replaced)
    reasons = {path: outcomes[str(path.relative_to(src))] for path in swapped}
    assert "became a symbolic link after the scan" in reasons[victim]
    assert "leads outside SRC" in reasons[src / "sub" / "secret.png"] and "leads outside SRC" in reasons[alias]
    assert "no longer the file the scan found" in reasons[replaced]
    assert sum(isinstance(value, bytes) for value in outcomes.values()) == len(keys) - 4


def _by_key(outcomes, keys: List[str]) -> Dict[str, object]:
    """{key: payload bytes, or the reason it was skipped}."""
    found: Dict[str, object] = {}
    for outcome in outcomes:
        if isinstance(outcome, Skipped):
            found[outcome.path] = outcome.reason
        elif isinstance(outcome, ConvertedRun):
            for sample in outcome.samples:
                found[sample.key] = bytes(memoryview(sample.payload))
        elif isinstance(outcome, Converted):
            found[outcome.sample.key] = bytes(memoryview(outcome.sample.payload))
    assert set(found) == set(keys)
    return found


def test_table_folder_links_out_are_skipped_and_listed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("v,kind\n666,evil\n667,evil\n")
    src = tmp_path / "tables"
    src.mkdir()
    (src / "a.csv").write_text("v,kind\n1,good\n2,good\n3,fine\n")
    os.symlink(outside / "secret.csv", src / "b.csv")
    os.symlink(outside, src / "more")
    (src / "c.csv").symlink_to("a.csv")                                  # inside: read like a.csv
    dst = tmp_path / "dst"
    report = shardkit.convert(str(src), str(dst), label_column="kind", quiet=True)
    ds = shardkit.open_dataset(dst)
    assert report.num_samples == 6 and "evil" not in ds.classes
    skipped = _skipped(dst)
    assert set(skipped) == {"b.csv", "more"} and all("outside SRC" in reason for reason in skipped.values())


@pytest.mark.parametrize("workers", [1, 2])
def test_a_table_swapped_for_a_link_after_its_header_was_read_is_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """The swap happens between the scan of the headers and the parse of the rows (a fixed point)."""
    from shardkit.sources.tabular import source as table_source
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("v,kind\n666,evil\n667,evil\n")
    src = tmp_path / "tables"
    src.mkdir()
    for name in ("a.csv", "b.csv"):
        (src / name).write_text("v,kind\n1,good\n2,fine\n")
    parse = table_source.parse_files

    def swap_then_parse(*args, **kwargs):
        (src / "b.csv").unlink()
        os.symlink(outside / "secret.csv", src / "b.csv")
        return parse(*args, **kwargs)
    monkeypatch.setattr(table_source, "parse_files", swap_then_parse)
    with pytest.raises(shardkit.SourceError, match=r"b\.csv: leads outside SRC"):
        shardkit.convert(str(src), str(tmp_path / "dst"), label_column="kind", workers=workers, quiet=True)
    assert not (tmp_path / "dst" / "manifest.json").exists()
