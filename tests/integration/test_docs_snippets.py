"""Every shell and Python block of README.md and docs/ runs as written, or says why not.

A fenced block is code when it is ```python, ```sh/```bash/```console, or untagged but starting
like a command (`shardkit ...`, `$ ...`, `pip ...`). Each code block is, by the HTML comments on
the lines right above it:
- `<!-- not-run: REASON -->`: not runnable here (placeholder paths, a cluster, minutes of work);
- `<!-- run-by: tests/PATH.py -->`: run by that test, which names the page;
- unmarked: run here, in page order, in a fresh folder with $SRC a small image tree and $DST a path
  that does not exist yet (shell blocks see them as environment variables, Python blocks as the
  strings SRC and DST, and the Python blocks of a page share one namespace).
"""
from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md"] + sorted(path for path in (REPO / "docs").rglob("*.md") if "hooks" not in path.parts)
SHELL_LANGS = {"sh", "bash", "shell", "console"}
COMMAND_START = re.compile(r"^(\$ |shardkit |python3? |pip |docker |PYTHONPATH=|mkdocs |hadolint |torchrun |ulimit )")
MARKER = re.compile(r"^<!--\s*(not-run|run-by):\s*(.*?)\s*-->$")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    markers: List[str]

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def kind(self) -> str:
        """"python", "shell" or "" (output, listings, JSON: nothing to run)."""
        if self.lang == "python":
            return "python"
        first = self.code.lstrip().split("\n", 1)[0]
        if self.lang in SHELL_LANGS or (not self.lang and COMMAND_START.match(first)):
            return "shell"
        return ""

    def marker(self, name: str) -> "str | None":
        for comment in self.markers:
            match = MARKER.match(comment)
            if match and match.group(1) == name:
                return match.group(2)
        return None


def page_blocks(page: Path) -> List[Block]:
    """The fenced blocks of a page, each with the HTML comment lines right above its fence."""
    lines = page.read_text().split("\n")
    blocks, number = [], 0
    while number < len(lines):
        fence = lines[number]
        if fence.startswith("```"):
            end = next(i for i in range(number + 1, len(lines)) if lines[i].startswith("```"))
            markers, above = [], number - 1
            while above >= 0 and lines[above].startswith("<!--"):
                markers.insert(0, lines[above].strip())
                above -= 1
            blocks.append(Block(page, number + 1, fence[3:].strip(), "\n".join(lines[number + 1:end]) + "\n", markers))
            number = end
        number += 1
    return blocks


def to_run(page: Path) -> List[Block]:
    return [block for block in page_blocks(page)
            if block.kind and block.marker("not-run") is None and block.marker("run-by") is None]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_code_block_runs_or_says_why_not(page: Path) -> None:
    for block in page_blocks(page):
        if not block.kind:
            continue
        reason, runner = block.marker("not-run"), block.marker("run-by")
        if reason is not None:
            assert reason, f"{block.where}: <!-- not-run: --> needs a reason"
        elif runner is not None:
            test = REPO / runner
            assert test.is_file(), f"{block.where}: run-by names {runner}, which does not exist"
            assert page.stem in test.read_text(), f"{block.where}: {runner} does not mention {page.name}"
        else:
            assert block.lang, (f"{block.where}: an untagged command block; tag it ```sh so this test runs it, "
                                "or mark it <!-- not-run: reason -->")
            assert "$ " not in block.code.split("\n", 1)[0], f"{block.where}: a console transcript cannot run; mark it"


RUNNABLE = [page for page in PAGES if to_run(page)]


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 small images in 4 classes: enough for every example, quick to convert many times."""
    from shardkit.samples import make_image_tree
    root = tmp_path_factory.mktemp("docs") / "images"
    make_image_tree(str(root), num_images=24, seed=2, sizes=(24, 96))
    return root


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda page: str(page.relative_to(REPO)))
def test_page_blocks_run(page: Path, small_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scope: Dict[str, Any] = {}
    try:
        run_blocks(to_run(page), tmp_path, {"SRC": str(small_tree), "DST": str(tmp_path / "dst")}, scope)
    finally:
        # A function a page defines holds the scope as its globals: a cycle that would keep the
        # page's DataLoader workers (persistent ones too) alive until the garbage collector runs.
        scope.clear()
        gc.collect()


def run_blocks(blocks: List[Block], cwd: Path, names: Dict[str, str], scope: Dict[str, Any]) -> None:
    """Run blocks in order in cwd: shell blocks see names as environment variables, Python blocks
    see them as strings, in scope (one namespace for all of them, left filled for the caller)."""
    env = {**os.environ, **names, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    scope.update(names, __name__="__docs__")
    for block in blocks:
        if block.kind == "python":
            exec(compile(block.code, block.where, "exec"), scope)
            continue
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{block.where} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
