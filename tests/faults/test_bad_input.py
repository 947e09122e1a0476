"""Damaged and awkward input trees, converted by the real `shardkit` command.

Default: each bad file is skipped and listed in skipped.jsonl with a reason; every good file
is stored byte for byte, in order, next to the bad ones; every stored sample decodes.
`--on-error fail` stops at the first bad input, `--max-errors N` once more than N failed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import shardkit
from shardkit.errors import ConversionError, EmptySourceError

from .corpus import Corpus, build_corpus, encode, oracle_decodes
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
    assert f"skipped {len(corpus.bad)} (" in result.stdout and "; see skipped.jsonl)" in result.stdout
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
    result = run_cli("convert", src.parent, tmp_path / "dst", "--format", fmt, "-q", "--order", "source")
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


def _as_nobody(work: Callable[[], None], warm_up: Callable[[], None]) -> None:
    """Run work in a forked child with root's privileges dropped to nobody (65534), so
    permissions apply; as another user, run it in a child too. warm_up runs first with the
    privileges the test has (it loads the modules work needs, which nobody may not be able to
    read). Fails if the child fails."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            warm_up()
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            work()
            code = 0
        except BaseException:  # noqa: BLE001 - shown, then the child's exit code says it failed
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged conversion failed"


#: Damaged inputs of the corpus that --validate fast / none store (per kind: let through / bad).
#: docs/reliability.md shows this table; the test below measures it.
LET_THROUGH = {
    "truncated JPEG": {"full": "0/15", "fast": "0/15", "none": "13/15"},
    "truncated PNG": {"full": "0/11", "fast": "0/11", "none": "7/11"},
    "truncated WebP": {"full": "0/14", "fast": "0/14", "none": "9/14"},
    "bit flip in a JPEG": {"full": "0/3", "fast": "1/3", "none": "3/3"},
    "bit flip in a PNG": {"full": "0/8", "fast": "0/8", "none": "6/8"},
    "bit flip in a WebP": {"full": "0/4", "fast": "0/4", "none": "3/4"},
    "decompression bomb (header, real)": {"full": "0/2", "fast": "0/2", "none": "2/2"},
    "flipped magic byte, text, HTML, zero bytes": {"full": "0/6", "fast": "0/6", "none": "0/6"},
    "broken link, link loop, FIFO": {"full": "0/3", "fast": "0/3", "none": "0/3"},
}
_EXTENSIONS = {".jpg": "JPEG", ".png": "PNG", ".webp": "WebP"}


def _damage_kind(rel: str) -> str:
    name = rel.rsplit("/", 1)[-1]
    cut = re.match(r"\d+-cut\d+of\d+(\.\w+)$", name)
    flip = re.match(r"\d+-at\d+(\.\w+)$", name)
    if cut:
        return f"truncated {_EXTENSIONS[cut.group(1)]}"
    if flip:
        return f"bit flip in a {_EXTENSIONS[flip.group(1)]}"
    if "bomb" in name:
        return "decompression bomb (header, real)"
    if rel.startswith("links/"):
        return "broken link, link loop, FIFO"
    return "flipped magic byte, text, HTML, zero bytes"


@pytest.mark.parametrize("validate", ["full", "fast", "none"])
def test_validate_modes_let_through_what_the_table_says(corpus: Corpus, tmp_path: Path, validate: str) -> None:
    """--validate fast/none check less: exactly the table's damaged inputs are stored, no good file
    is lost (except, in fast, PNGs without their IEND end chunk), and verify --deep finds every
    damaged sample that was stored."""
    dst = tmp_path / "out"
    shardkit.convert(str(corpus.root), str(dst), validate=validate, samples_per_shard=16, quiet=True)
    skipped = _skipped(dst)
    kinds = {kind: [0, 0] for kind in LET_THROUGH}
    for rel in corpus.bad:
        kinds[_damage_kind(rel)][1] += 1
        kinds[_damage_kind(rel)][0] += rel not in skipped
    assert {kind: f"{through}/{total}" for kind, (through, total) in kinds.items()} == \
        {kind: row[validate] for kind, row in LET_THROUGH.items()}
    lost = [rel for rel in corpus.good if rel in skipped]
    assert all(rel.endswith(".png") and b"IEND" not in (corpus.root / rel).read_bytes() for rel in lost), lost
    assert len(lost) == (1 if validate == "fast" else 0)
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["schema"]["codec"]["validate"] == validate
    stored_bad = sum(through for through, _ in kinds.values())
    report = shardkit.verify(str(dst), mode="deep", workers=1)
    assert sum(problem.kind == "sample" for problem in report.problems) == stored_bad


def test_reliability_page_shows_the_validate_table() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text()
    for kind, row in LET_THROUGH.items():
        assert f"| {kind} | {row['full']} | {row['fast']} | {row['none']} |" in page, kind


def test_unreadable_file_is_skipped(fmt: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="shardkit-unreadable-"))
    try:
        base.chmod(0o777)
        src = base / "src" / "cls"
        src.mkdir(parents=True)
        (src / "good.jpg").write_bytes(encode(np.random.default_rng(3), "JPEG"))
        (src / "secret.jpg").write_bytes(encode(np.random.default_rng(4), "JPEG"))
        (src / "secret.jpg").chmod(0)
        for folder in (base / "src", src):
            folder.chmod(0o755)

        def convert(dst: Path = base / "dst", expected: int = 1) -> None:
            report = shardkit.convert(str(src.parent), str(dst), format=fmt, quiet=True)
            assert report.num_samples == expected

        warm = base / "warm"
        _as_nobody(convert, warm_up=lambda: convert(warm, 1 if os.geteuid() else 2))
        assert not os.geteuid() or (warm / "manifest.json").exists()
        assert "cannot read" in _skipped(base / "dst")["cls/secret.jpg"]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_sort_order_matches_shardkit(tmp_path: Path) -> None:
    """Samples follow the sorted path components, not the sorted full path: a hand-written order
    (code point order per component) against what shardkit stores."""
    from PIL import Image
    expected = ["c/10.png", "c/2.png", "c/B.png", "c/a/b.png", "c/a-b.png", "c/a.png", "c/\u00e9.png"]
    assert sorted(expected) != expected                      # a plain string sort would differ
    src = tmp_path / "src"
    for number, rel in enumerate(reversed(expected)):
        path = src / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("L", (2, 2), number * 30).save(path)
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), order="source", quiet=True)
    ds = shardkit.open_dataset(dst, decode=None)
    assert [bytes(memoryview(ds[i][0])) for i in range(len(ds))] == [(src / rel).read_bytes() for rel in expected]
