"""Every convert option is declared once, as a field of an option class (options.py): the click
options of `shardkit convert` are generated from the fields, `shardkit.convert()`'s typed signature
must match them, and a value is checked the same way whichever door it came in by."""
from __future__ import annotations

import inspect
import json
import os
import typing
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import click
import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.cli.convert_cmd import command
from shardkit.errors import UsageError
from shardkit.options import GROUPS, known_names

CLI_ONLY = {"src", "dst", "as_json"}


def _fields() -> dict:
    """Every option class field by keyword: (Flag, kind, its annotation), the first class's for a
    keyword two source kinds share."""
    found: dict = {}
    for group in GROUPS:
        hints = typing.get_type_hints(group)
        for name, spec in group.specs().items():
            found.setdefault(name, (spec, hints[name]))
    return found


def test_the_cli_offers_each_option_field_once_as_declared() -> None:
    """Spelling, help, choices and metavar of each click option are the field's Flag (a mutation
    dropping the choices from the generated options fails here); a keyword two source kinds share
    has one Flag."""
    options = {param.name: param for param in command.params if param.name not in CLI_ONLY}
    python_only = {name for name, (spec, _) in _fields().items() if not spec.flag.cli}
    assert python_only == {"storage_options"}
    assert list(options) == [name for name in _fields() if name not in python_only]
    assert sorted(options) == sorted(set(known_names()) - python_only)
    for name, (spec, _) in _fields().items():
        if name in python_only:
            continue
        option = options[name]
        flag = spec.flag
        assert option.opts[0] == flag.spelling.split("/")[0]
        assert option.help.startswith(flag.help) and (option.metavar or None) == flag.metavar, name
        if flag.choices:
            assert isinstance(option.type, click.Choice) and tuple(option.type.choices) == flag.choices, name
        assert option.default in (None, False), f"{name}: the classes, not click, apply defaults"
    for group in GROUPS:
        for name, spec in group.specs().items():
            assert spec.flag is _fields()[name][0].flag, f"{name} is declared twice"


def test_convert_signature_matches_the_option_fields() -> None:
    """shardkit.convert() spells every option for an IDE; adding, renaming or retyping a field
    without its parameter (or the reverse) fails here."""
    signature = inspect.signature(shardkit.convert)
    hints = typing.get_type_hints(shardkit.convert)
    params = [name for name, param in signature.parameters.items() if param.kind is param.KEYWORD_ONLY]
    assert params == list(_fields())
    for name, (spec, annotation) in _fields().items():
        default = signature.parameters[name].default
        if spec.kind == "flag":
            assert (hints[name], default) == (bool, spec.default), name
            continue
        accepted = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Union \
            and type(None) in typing.get_args(annotation) and len(typing.get_args(annotation)) == 2 else annotation
        if spec.kind == "path":
            accepted = Union[str, os.PathLike[str]]
        elif spec.kind == "list":
            accepted = Union[str, Sequence[str]]
        # None means "the option's default"; or the parameter states that default itself
        assert (hints[name], default) in ((Optional[accepted], None), (accepted, spec.default)), name


def test_a_value_is_checked_the_same_through_python_and_the_cli(image_tree: Path, tmp_path: Path) -> None:
    """One check per option: a choice outside the field's choices is refused by both doors."""
    with pytest.raises(UsageError, match="--order must be one of shuffled, source, not 'reverse'"):
        shardkit.convert(image_tree, tmp_path / "out", order="reverse")
    result = CliRunner().invoke(main, ["convert", str(image_tree), str(tmp_path / "out"), "--order", "reverse"])
    assert result.exit_code == 2 and "'reverse' is not one of 'shuffled', 'source'" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("keywords, message", [
    ({"image_mode": "raw", "size": 64}, "--size takes two whole numbers, H W, not 64"),
    ({"samples_per_shard": "4"}, "--samples-per-shard must be a whole number, not '4'"),
    ({"quality": 9.5}, "--quality must be a whole number"),
    ({"resume": "yes"}, "--resume is on or off"),
    ({"labels": 3}, "--labels must be a path"),
])
def test_a_value_of_the_wrong_type_is_a_usage_error(keywords: dict, message: str, image_tree: Path,
                                                    tmp_path: Path) -> None:
    with pytest.raises(UsageError) as raised:
        shardkit.convert(image_tree, tmp_path / "out", **keywords)
    assert message in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_columns_as_text_are_split_like_the_cli(tmp_path: Path) -> None:
    """columns="a,c" keeps columns a and c (as --columns a,c does), not the letters of the text."""
    table = tmp_path / "rows.csv"
    table.write_text("a,b,c,y\n" + "".join(f"{i},{i * 2},{i * 3},{i % 2}\n" for i in range(10)))
    spelt: Any = {}
    for name, columns in (("text", "a, c"), ("list", ["a", "c"])):
        shardkit.convert(table, tmp_path / name, label_column="y", columns=columns)
        spelt[name] = json.loads((tmp_path / name / "manifest.json").read_text())["schema"]
    assert spelt["text"] == spelt["list"]
    assert spelt["text"]["shape"] == [2]
    result = CliRunner().invoke(main, ["convert", str(table), str(tmp_path / "cli"), "--label-column", "y",
                                       "--columns", "a,c", "-q"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "cli" / "manifest.json").read_text())["schema"] == spelt["list"]


def test_a_mistyped_command_points_at_the_right_help() -> None:
    result = CliRunner().invoke(main, ["verfiy", "x"], prog_name="shardkit")
    assert result.exit_code == 2
    assert "Did you mean 'verify'? (see shardkit --help)" in result.output and "shardkit shardkit" not in result.output
    result = CliRunner().invoke(main, ["convert", "a", "b", "--format", "zarr"], prog_name="shardkit")
    assert "(see shardkit convert --help)" in result.output
