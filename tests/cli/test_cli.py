"""The shardkit command: exit codes, one-line errors, JSON output."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.cli import main


def run(*args: str) -> "CliRunner.invoke":
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_convert_verify_info(image_tree: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / "out"
    result = run("convert", image_tree, dst, "--format", fmt, "--samples-per-shard", "50", "--quiet")
    assert result.exit_code == 0, result.output
    assert "wrote 120 samples in 3" in result.output
    result = run("verify", dst, "--json")
    assert result.exit_code == 0
    assert json.loads(result.output)["ok"] is True
    result = run("info", dst)
    assert result.exit_code == 0 and "120 in 3 shards" in result.output
    info = json.loads(run("info", dst, "--json").output)
    assert info["format"] == fmt and info["classes"] == ["circle", "square", "stripes", "triangle"]
    if fmt == "lmdb":       # image records keep their CRC32s: no sample table
        assert info["sample_table"] is None and "sample table none" in result.output
    else:
        assert info["sample_table"]["size"] == 120 * 12 and "sample table sample_table.bin" in result.output


@pytest.mark.parametrize("args, message", [
    (["convert", "{missing}", "{dst}"], "no such file or directory"),
    (["convert", "{tree}", "{dst}", "--format", "zarr"], "'zarr' is not one of 'hdf5', 'lmdb', 'pt'"),
    (["convert", "{tree}", "{dst}", "--shard-size", "12 parsecs"], "invalid size"),
    (["convert", "{tree}", "{dst}", "--samples-per-shard", "0"], "at least 1"),
    (["convert", "{tree}", "{dst}", "--part", "4/4"], "invalid part"),
    (["convert", "{tree}", "{dst}", "--resume", "--overwrite"], "contradict"),
    (["verify", "{missing}"], "no such dataset"),
    (["verify", "{tree}"], "not a shardkit dataset"),
    (["info", "{tree}"], "not a shardkit dataset"),
    (["verify", "{tree}", "--bogus"], "No such option"),
])
def test_usage_errors_exit_2_with_one_line(args, message, image_tree: Path, tmp_path: Path) -> None:
    values = {"missing": tmp_path / "nope", "dst": tmp_path / "dst", "tree": image_tree}
    result = CliRunner().invoke(main, [a.format(**values) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_non_empty_destination_is_refused(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    assert run("convert", image_tree, dst, "-q").exit_code == 0
    before = (dst / "manifest.json").read_bytes()
    result = CliRunner().invoke(main, ["convert", str(image_tree), str(dst), "-q"])
    assert result.exit_code == 2 and "--overwrite" in result.output
    assert (dst / "manifest.json").read_bytes() == before
    result = run("convert", image_tree, dst, "-q", "--overwrite", "--samples-per-shard", "60")
    assert result.exit_code == 0 and "in 2 hdf5 shards" in result.output


def test_overwrite_never_deletes_foreign_files(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "thesis.tex").write_text("precious")
    result = CliRunner().invoke(main, ["convert", str(image_tree), str(dst), "--overwrite", "-q"])
    assert result.exit_code == 2 and "did not write" in result.output
    assert (dst / "thesis.tex").read_text() == "precious"


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """src/: 8 images; dst/: their dataset in 2 shards."""
    from shardkit.samples import make_image_tree
    root = tmp_path_factory.mktemp("small")
    make_image_tree(str(root / "src"), num_images=8, seed=2)
    assert run("convert", root / "src", root / "dst", "-q", "--samples-per-shard", "4").exit_code == 0
    return root


@pytest.mark.parametrize("foreign, named", [
    ("shards/notes.txt", "shards/notes.txt"), ("shards/extra/shard-00009.h5", "shards/extra"),
    (".shardkit/keep.txt", ".shardkit/keep.txt"), (".shardkit/done/keep.txt", ".shardkit/done/keep.txt")])
def test_overwrite_never_deletes_foreign_files_in_its_own_folders(foreign: str, named: str, small_dataset: Path,
                                                                  tmp_path: Path) -> None:
    """--overwrite replaces what shardkit wrote; a file it did not write, even inside shards/ or
    the journal, makes it refuse (exit 2, naming the file) and touch nothing."""
    dst = tmp_path / "dst"
    shutil.copytree(small_dataset / "dst", dst)
    (dst / foreign).parent.mkdir(parents=True, exist_ok=True)
    (dst / foreign).write_text("precious")
    before = {path: path.read_bytes() for path in dst.rglob("*") if path.is_file()}
    result = CliRunner().invoke(main, ["convert", str(small_dataset / "src"), str(dst), "--overwrite", "-q"])
    assert result.exit_code == 2 and f"did not write ({named})" in result.output
    assert {path: path.read_bytes() for path in dst.rglob("*") if path.is_file()} == before


def test_clean_up_after_an_empty_source_leaves_foreign_files(tmp_path: Path) -> None:
    """A run that finds nothing usable removes what it wrote, and only that."""
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    (src / "broken.png").write_bytes(b"not a png")
    dst = tmp_path / "dst"
    (dst / "shards").mkdir(parents=True)
    (dst / "shards" / "notes.txt").write_text("precious")
    result = CliRunner().invoke(main, ["convert", str(tmp_path / "src"), str(dst), "--resume", "-q"])
    assert result.exit_code == 1 and "no usable sample" in result.output
    assert (dst / "shards" / "notes.txt").read_text() == "precious"
    assert sorted(path.relative_to(dst).as_posix() for path in dst.rglob("*")) == ["shards", "shards/notes.txt"]


def test_verify_failure_exits_1(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    run("convert", image_tree, dst, "-q")
    next((dst / "shards").iterdir()).unlink()
    result = CliRunner().invoke(main, ["verify", str(dst)])
    assert result.exit_code == 1
    assert "shard is missing" in result.output and "FAILED" in result.output


def test_empty_source_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "empty"
    (src / "cats").mkdir(parents=True)
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "dst")])
    assert result.exit_code == 1 and "no input" in result.output
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_console_entry_point_runs(image_tree: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "shardkit", "convert", str(image_tree), str(tmp_path / "d"),
                           "--format", "nope"], capture_output=True, text=True)
    assert done.returncode == 2
    choices = ", ".join(repr(name) for name in __import__("shardkit.formats").formats.format_names())
    assert done.stderr.strip().splitlines() == [f"error: Invalid value for '--format': 'nope' is not one of "
                                                f"{choices}. (see shardkit convert --help)"]


def test_info_shows_samples_per_class(tmp_path: Path) -> None:
    from shardkit.samples import make_image_tree
    src = tmp_path / "src"
    make_image_tree(str(src), num_images=7, classes=("a", "b"), seed=3)
    expected = {name: len(list((src / name).rglob("*.*"))) for name in ("a", "b")}
    dst = tmp_path / "dst"
    assert run("convert", str(src), str(dst), "-q").exit_code == 0
    data = json.loads(run("info", str(dst), "--json").output)
    assert data["samples_per_class"] == [expected["a"], expected["b"]]
    assert f"a ({expected['a']}), b ({expected['b']})" in run("info", str(dst)).output
    resharded = tmp_path / "lmdb"
    assert run("convert", str(dst), str(resharded), "--format", "lmdb", "-q").exit_code == 0
    assert json.loads(run("info", str(resharded), "--json").output)["samples_per_class"] == data["samples_per_class"]


def test_info_of_a_dataset_written_before_counts_were_recorded() -> None:
    golden = Path(__file__).resolve().parents[1] / "golden" / "hdf5-v1"
    result = run("info", str(golden))
    assert result.exit_code == 0 and "2 classes: cat, dog" in result.output
    assert json.loads(run("info", str(golden), "--json").output)["samples_per_class"] is None
