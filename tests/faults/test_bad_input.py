"""Damaged and awkward input trees, converted by the real `shardkit` command.

Default: each bad file is skipped and listed in skipped.jsonl with a reason; every good file
is stored byte for byte, in order, next to the bad ones; every stored sample decodes.
`--on-error fail` stops at the first bad input, `--max-errors N` once more than N failed.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import shardkit
from shardkit.errors import ConversionError, EmptySourceError

from .corpus import Corpus, build_corpus, encode, oracle_decodes, sort_key
from .helpers import assert_no_traceback, error_lines, run_cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    return build_corpus(tmp_path_factory.mktemp("corpus") / "src")


def _skipped(dst: Path) -> dict:
    lines = (dst / "skipped.jsonl").read_bytes().decode("utf-8", "surrogateescape").splitlines()
    return {json.loads(line)["path"]: json.loads(line)["reason"] for line in lines}


def test_corpus_is_what_it_claims(corpus: Corpus) -> None:
    """The corpus really holds bad files of every kind, each next to good ones."""
    assert len(corpus.bad) >= 60 and len(corpus.good) >= 100
    names = "\n".join(corpus.image_paths)
    for kind in ("cut", "at0", "magic", "zero-bytes", "text.jpg", "bomb-header", "bomb-real",
                 "broken-link", "self-loop", "fifo", "new\nline", "-rf.jpg", "ünïcødé", "cmyk", "gray16",
                 "palette", "png-named.JPEG", "0007-folder.jpg/inner-good.jpg"):
        assert kind in names, kind
    ordered = corpus.image_paths
    for rel in corpus.bad:
        position = ordered.index(rel)
        neighbours = ordered[max(0, position - 1):position] + ordered[position + 1:position + 2]
        assert any(n in corpus.good for n in neighbours), rel


def test_default_skips_each_bad_file_and_keeps_every_good_one(corpus: Corpus, fmt: str, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    result = run_cli("convert", corpus.root, dst, "--format", fmt, "--samples-per-shard", "7", "--quiet",
                     "--order", "source")     # the good files are checked below in sorted order
    assert result.returncode == 0, result.stderr
    assert_no_traceback(result)
    assert f"skipped {len(corpus.bad)} (see skipped.jsonl)" in result.stdout
    assert "warning: class folder 'zz-empty-class' holds no image" in result.stderr

    skipped = _skipped(dst)
    assert set(skipped) == set(corpus.bad), "skipped.jsonl must list exactly the bad inputs"
    for rel, word in corpus.bad.items():
        reason = skipped[rel]
        assert len(reason) > 10 and "Traceback" not in reason, (rel, reason)
        if word:
            assert re.search(word, reason, re.IGNORECASE), (rel, reason)

    # every good file is stored, byte for byte, in sorted order, with its folder's label
    ds = shardkit.open_dataset(dst, decode=None, verify_checksums=True)
    assert len(ds) == len(corpus.good)
    for index, rel in enumerate(corpus.good):
        payload, label = ds[index]
        assert bytes(memoryview(payload)) == (corpus.root / rel).read_bytes(), rel
        assert ds.classes[label] == rel.split("/")[0], rel
    # and every stored sample decodes, by the independent oracle and through the reader
    decoded = shardkit.open_dataset(dst, decode="numpy")
    for index in range(len(ds)):
        assert oracle_decodes(bytes(memoryview(ds[index][0])))
        image, _ = decoded[index]
        assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    summary = json.loads((dst / "manifest.json").read_text())["source"]["summary"]
    assert summary["converted"] == len(corpus.good) and summary["skipped"] == len(corpus.bad)
    assert summary["empty_classes"] == corpus.empty_classes
    assert shardkit.verify(str(dst), mode="deep").ok


@pytest.mark.parametrize("mode, options", [("jpeg", {"resize": 8}), ("raw", {"size": (8, 8)})])
def test_converted_image_modes_skip_the_same_inputs(corpus: Corpus, fmt: str, tmp_path: Path, mode: str,
                                                    options: dict) -> None:
    """Re-encoding modes decode every input fully (CMYK, 16-bit, palette and alpha to RGB): the
    same inputs are skipped, every good one is stored, and every stored sample decodes."""
    dst = tmp_path / "out"
    report = shardkit.convert(str(corpus.root), str(dst), format=fmt, image_mode=mode, samples_per_shard=16,
                              order="source", quiet=True, **options)
    assert set(_skipped(dst)) == set(corpus.bad)
    assert report.num_samples == len(corpus.good)
    ds = shardkit.open_dataset(dst, decode="numpy", verify_checksums=True)
    for index, rel in enumerate(corpus.good):
        image, label = ds[index]
        assert image.dtype == np.uint8 and image.shape[2] == 3 and min(image.shape[:2]) == 8, rel
        assert ds.classes[label] == rel.split("/")[0], rel


def test_on_error_fail_stops_at_the_first_bad_input(corpus: Corpus, fmt: str, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    result = run_cli("convert", corpus.root, dst, "--format", fmt, "--samples-per-shard", "7", "--quiet",
                     "--on-error", "fail")
    assert result.returncode == 1, result.stderr
    assert_no_traceback(result)
    [line] = error_lines(result)
    assert "(--on-error fail)" in line
    named = [rel for rel in corpus.bad if rel.encode("unicode_escape").decode() in line or rel in line]
    assert named, f"the error must name a bad file: {line}"
    assert not (dst / "manifest.json").exists()


@pytest.mark.parametrize("slack", [-1, 0])
def test_max_errors(corpus: Corpus, fmt: str, tmp_path: Path, slack: int) -> None:
    """--max-errors N tolerates N failed inputs and stops at the next one."""
    limit = len(corpus.bad) + slack
    dst = tmp_path / "out"
    result = run_cli("convert", corpus.root, dst, "--format", fmt, "--samples-per-shard", "7", "--quiet",
                     "--max-errors", limit, "--order", "source")    # where it stops is checked in sorted order
    assert_no_traceback(result)
    if slack < 0:
        assert result.returncode == 1, result.stderr
        assert "--max-errors" in error_lines(result)[0]
        assert not (dst / "manifest.json").exists()
        # it stopped at the last bad input: shards before it were written, its own and later ones not
        scan_time = {rel for rel, word in corpus.bad.items() if word in ("link", "regular file")}
        planned = [rel for rel in corpus.image_paths if rel not in scan_time]
        last_bad = planned.index(max(set(corpus.bad) - scan_time, key=planned.index))
        written = sorted(p.name for p in (dst / "shards").glob("shard-*"))
        assert written == [f"shard-{k:05d}{_extension(fmt)}" for k in range(last_bad // 7)]
    else:
        assert result.returncode == 0, result.stderr
        assert len(_skipped(dst)) == len(corpus.bad)


def _extension(fmt: str) -> str:
    from shardkit.formats import get_format
    return get_format(fmt).extension


BAD_ONE = {
    "zero-bytes.jpg": (b"", "empty file"),
    "text.jpg": (b"plain text, not a picture\n", "not an image"),
    "bad\nname.png": (b"\x89PNG\r\n\x1a\n garbage", "not an image|does not decode"),
    "-dash.jpg": (b"\xff\xd8\xff\xe0 truncated", "does not decode|not an image"),
    "bomb.png": (None, "decompression bomb"),
}


@pytest.mark.parametrize("name", sorted(BAD_ONE))
def test_each_failure_names_its_file(name: str, fmt: str, tmp_path: Path) -> None:
    """--on-error fail: the error is a ShardkitError whose one message names the file."""
    from .corpus import bomb_header_png
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    rng = np.random.default_rng(0)
    (src / "a-good.jpg").write_bytes(encode(rng, "JPEG"))
    data, reason = BAD_ONE[name]
    (src / name).write_bytes(bomb_header_png(40000, 40000) if data is None else data)
    (src / "z-good.png").write_bytes(encode(rng, "PNG"))
    with pytest.raises(ConversionError) as caught:
        shardkit.convert(str(src.parent), str(tmp_path / "dst"), format=fmt, on_error="fail", quiet=True)
    assert f"cls/{name}" in str(caught.value) and re.search(reason, str(caught.value))
    report = shardkit.convert(str(src.parent), str(tmp_path / "dst2"), format=fmt, quiet=True)
    assert report.num_samples == 2 and report.skipped == 1


def test_scan_time_failure_stops_before_any_shard(tmp_path: Path) -> None:
    """Scan-time failures (broken link, link loop, FIFO) are found before any shard is written,
    whatever the format (none is opened)."""
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    (src / "good.jpg").write_bytes(encode(np.random.default_rng(1), "JPEG"))
    os.symlink("missing.jpg", src / "broken.jpg")
    result = run_cli("convert", src.parent, tmp_path / "dst", "--on-error", "fail", "-q")
    assert result.returncode == 1 and "cls/broken.jpg: broken symbolic link" in result.stderr
    assert_no_traceback(result)
    assert list((tmp_path / "dst" / "shards").iterdir()) == []


def test_empty_src_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    result = run_cli("convert", tmp_path / "src", tmp_path / "dst", "-q")
    assert result.returncode == 1 and "no input to convert" in result.stderr
    assert_no_traceback(result)
    assert not (tmp_path / "dst").exists()


def test_only_empty_class_folders(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / "src" / name).mkdir(parents=True)
    with pytest.raises(EmptySourceError, match="no input"):
        shardkit.convert(str(tmp_path / "src"), str(tmp_path / "dst"), quiet=True)
    assert not (tmp_path / "dst").exists()


def test_src_of_only_bad_files_leaves_no_dataset(fmt: str, tmp_path: Path) -> None:
    """Every input skipped: exit 1, and a DST this run created is removed again."""
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    (src / "a.jpg").write_bytes(b"")
    (src / "b.png").write_bytes(b"not a png")
    result = run_cli("convert", src.parent, tmp_path / "dst", "--format", fmt, "-q")
    assert result.returncode == 1 and "no usable sample" in result.stderr and "cls/a.jpg" in result.stderr
    assert_no_traceback(result)
    assert not (tmp_path / "dst").exists()
    # a DST that existed before (empty) is left as it was: empty
    (tmp_path / "mine").mkdir()
    result = run_cli("convert", src.parent, tmp_path / "mine", "--format", fmt, "-q")
    assert result.returncode == 1
    assert os.listdir(tmp_path / "mine") == []


@pytest.mark.parametrize("kind", ["file", "missing", "broken-link"])
def test_src_that_is_not_a_folder(kind: str, tmp_path: Path) -> None:
    src = tmp_path / "src.jpg"
    if kind == "file":
        src.write_bytes(encode(np.random.default_rng(2), "JPEG"))
    elif kind == "broken-link":
        os.symlink("nowhere", src)
    result = run_cli("convert", src, tmp_path / "dst", "-q")
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result)
    assert str(src) in error_lines(result)[0]
    assert not (tmp_path / "dst").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file_is_skipped(fmt: str, tmp_path: Path) -> None:
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    (src / "good.jpg").write_bytes(encode(np.random.default_rng(3), "JPEG"))
    (src / "secret.jpg").write_bytes(encode(np.random.default_rng(4), "JPEG"))
    (src / "secret.jpg").chmod(0)
    report = shardkit.convert(str(src.parent), str(tmp_path / "dst"), format=fmt, quiet=True)
    assert report.num_samples == 1
    assert "cannot read" in _skipped(tmp_path / "dst")["cls/secret.jpg"]


def test_sort_order_matches_shardkit(corpus: Corpus) -> None:
    """The corpus oracle orders paths the way shardkit documents (by path components)."""
    assert corpus.image_paths == sorted(corpus.image_paths, key=sort_key)
