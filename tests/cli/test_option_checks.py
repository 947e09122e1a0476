"""Options are never ignored: unknown ones, ones that do not apply to SRC's kind, contradictory ones
and out-of-range ones are usage errors (exit 2, one line, or one JSON object under --json)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.errors import UnknownOptionError, UsageError


@pytest.fixture
def csv_file(tmp_path: Path) -> Path:
    path = tmp_path / "rows.csv"
    path.write_text("a,b,y\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(12)))
    return path


def _invoke(*args: str) -> "CliRunner.invoke":
    return CliRunner().invoke(main, [str(arg) for arg in args])


def test_misspelt_open_dataset_option_is_an_error_with_a_suggestion(dataset_dir: Path) -> None:
    with pytest.raises(UnknownOptionError, match="'verify_checksum'; did you mean 'verify_checksums'"):
        shardkit.open_dataset(dataset_dir, verify_checksum=True)
    with pytest.raises(TypeError):
        shardkit.open_dataset(dataset_dir, readahaed=False)


def test_a_known_reader_option_is_accepted(dataset_dir: Path, fmt: str) -> None:
    if fmt == "pt":
        with pytest.raises(UnknownOptionError, match="'readahead'"):
            shardkit.open_dataset(dataset_dir, readahead=False)
    else:
        assert len(shardkit.open_dataset(dataset_dir, readahead=False)) == 120


def test_misspelt_convert_option_is_an_error(image_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(UnknownOptionError, match="'sample_per_shard'; did you mean 'samples_per_shard'"):
        shardkit.convert(str(image_tree), str(tmp_path / "out"), sample_per_shard=4)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, flag", [
    (["--image-mode", "raw", "--size", "4", "4"], "--image-mode"),
    (["--quality", "80"], "--quality"),
    (["--background", "#000000"], "--background"),
    (["--labels", "x.csv"], "--labels"),
])
def test_image_options_on_a_csv_source_are_refused(args: List[str], flag: str, csv_file: Path,
                                                   tmp_path: Path) -> None:
    result = _invoke("convert", csv_file, tmp_path / "out", "--label-column", "y", "-q", *args)
    assert result.exit_code == 2, result.output
    assert flag in result.output and "not apply to a CSV source" in result.output
    assert result.output.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, flag", [
    (["--text-columns", "a"], "--text-columns"),
    (["--columns", "a,b"], "--columns"),
    (["--schema", "s.json"], "--schema"),
])
def test_csv_options_on_an_image_tree_are_refused(args: List[str], flag: str, image_tree: Path,
                                                  tmp_path: Path) -> None:
    result = _invoke("convert", image_tree, tmp_path / "out", "-q", *args)
    assert result.exit_code == 2, result.output
    assert flag in result.output and "does not apply to an image tree" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["--label-column", "--path-column", "--delimiter"])
def test_labels_csv_options_without_labels_are_refused(flag: str, image_tree: Path, tmp_path: Path) -> None:
    result = _invoke("convert", image_tree, tmp_path / "out", "-q", flag, ";")
    assert result.exit_code == 2 and f"{flag} applies to a CSV source or to the labels CSV" in result.output
    assert not (tmp_path / "out").exists()


def test_readahead_on_pt_is_refused(image_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not apply to pt"):
        shardkit.convert(str(image_tree), str(tmp_path / "out"), format="pt", readahead=True, quiet=True)
    assert not (tmp_path / "out").exists()


def test_verify_quick_and_deep_are_mutually_exclusive(dataset_dir: Path) -> None:
    for order in (["--quick", "--deep"], ["--deep", "--quick"]):
        result = _invoke("verify", dataset_dir, *order)
        assert result.exit_code == 2 and "mutually exclusive" in result.output, result.output


@pytest.mark.parametrize("command", ["convert", "verify"])
def test_workers_zero_is_refused_by_every_command(command: str, dataset_dir: Path, tmp_path: Path) -> None:
    args = [dataset_dir, tmp_path / "out"] if command == "convert" else [dataset_dir]
    result = _invoke(command, *args, "--workers", "0")
    assert result.exit_code == 2 and "--workers must be at least 1" in result.output, result.output
    with pytest.raises(UsageError, match="at least 1"):
        shardkit.verify(str(dataset_dir), workers=0)


@pytest.mark.parametrize("args, kind, code", [
    (["verify", "{missing}", "--json"], "NotADatasetError", 2),
    (["info", "{missing}", "--json"], "NotADatasetError", 2),
    (["convert", "{tree}", "{out}", "--json", "--format", "zarr"], "UsageError", 2),
    (["convert", "{tree}", "{out}", "--json", "--text-columns", "a"], "UsageError", 2),
    (["verify", "{dataset}", "--json", "--quick", "--deep"], "UsageError", 2),
])
def test_json_errors_are_json(args: List[str], kind: str, code: int, image_tree: Path, dataset_dir: Path,
                              tmp_path: Path) -> None:
    values = {"missing": tmp_path / "nope", "tree": image_tree, "out": tmp_path / "out", "dataset": dataset_dir}
    result = CliRunner().invoke(main, [arg.format(**values) for arg in args])
    assert result.exit_code == code
    error = json.loads(result.stdout)["error"]
    assert error["type"] == kind and error["exit_code"] == code and error["message"]


@pytest.mark.parametrize("flag, good", [("--format", "lmdb"), ("--image-mode", "png"), ("--compression", "gzip")])
def test_choices_come_from_the_registries(flag: str, good: str, image_tree: Path, tmp_path: Path) -> None:
    from shardkit.cli.convert_cmd import command
    choices = {option.opts[0]: getattr(option.type, "choices", None) for option in command.params}
    assert good in choices[flag]
    result = _invoke("convert", image_tree, tmp_path / "out", flag, "bogus")
    assert result.exit_code == 2 and "is not one of" in result.output


def test_format_reader_options_round_trip_and_refuse_unknown_keys() -> None:
    from shardkit.formats import get_format
    options = get_format("lmdb").reader_options
    assert options.from_dict({"readahead": False}, "x").to_dict() == {"readahead": False}
    assert options.from_dict({}, "x").to_dict() == {"readahead": True}
    with pytest.raises(UnknownOptionError, match="'readahed'; did you mean 'readahead'"):
        options.from_dict({"readahed": False}, "x")
    with pytest.raises(UsageError, match="readahead must be bool"):
        options.from_dict({"readahead": "no"}, "x")
    assert get_format("pt").reader_options.from_dict({}, "x").to_dict() == {}


def test_unknown_option_error_is_built_from_its_fields() -> None:
    import pickle
    error = UnknownOptionError("convert", "sizee", "size")
    assert str(error) == "convert: unknown option 'sizee'; did you mean 'size'?"
    error.suggestion = None
    error.known = ("a", "b")
    assert str(error) == "convert: unknown option 'sizee'; known: a, b"
    assert str(pickle.loads(pickle.dumps(error))) == str(error) and error.exit_code == 2
