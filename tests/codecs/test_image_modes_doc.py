"""docs/image-modes.md stays true: its Python blocks run, its error examples are the real messages."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "image-modes.md"


def blocks(language: str) -> list:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.mark.parametrize("number", range(len(blocks("python"))))
def test_python_blocks_run(number: int) -> None:
    exec(compile(blocks("python")[number], f"{DOC.name} python block {number}", "exec"), {})


def test_error_examples_are_the_real_messages(image_tree: Path, tmp_path: Path) -> None:
    examples = re.findall(r"^\$ shardkit (.*)\n(error: .*)$", DOC.read_text(), flags=re.M)
    assert len(examples) >= 2
    for command, expected in examples:
        args = [str(image_tree) if arg == "SRC" else str(tmp_path / "dst") if arg == "DST" else arg
                for arg in shlex.split(command)]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2
        assert result.output.strip() == expected


def test_every_mode_is_documented() -> None:
    from shardkit.codecs.image import ENCODERS, IMAGE_MODES
    text = DOC.read_text()
    for mode in IMAGE_MODES:
        assert f"| `{mode}`" in text
    for name, (_, options) in ENCODERS.items():
        for key, value in options.items():
            assert f"{key}={value!r}".replace("'", '"') in text, (name, key)
