"""Commands the documentation shows but cannot run here (benchmarks of minutes, clusters,
placeholder paths) still name what exists: every `shardkit SUBCOMMAND` a real subcommand with
real options, every `python benchmarks/X.py` / `examples/X.py` a real script with options its
argument parser defines. Code blocks and inline code of README.md, docs/ and formats/ are read."""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterator, List, Set, Tuple

import click
import pytest

from shardkit.cli import main

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "formats").glob("*.md"))]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
COMMAND_END = re.compile(r"&&|\|\||[|;#`]|\)")
SHARDKIT = re.compile(r"(?:^|(?<=[\s\"'(;&|$]))shardkit ([a-z]+)\b")
SCRIPT = re.compile(r"(?:^|(?<=[\s\"'(;&|$]))(?:python3? |torchrun (?:--?[\w-]+(?:[ =]\d+)? )*)"
                    r"((?:benchmarks|examples)/[\w/]+\.py)\b")


def command_texts(page: Path) -> Iterator[Tuple[int, str]]:
    """(line number, text) of every code-block line (continuations joined) and inline code span
    (spans may wrap across the lines of a paragraph)."""
    fenced, pending, start = False, "", 0
    prose: List[Tuple[int, str]] = []
    for number, line in enumerate(page.read_text().split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    "):
            if not pending:
                start = number
            pending += re.sub(r"(^|\s)#.*$", "", line).rstrip("\\") + " "     # comments are prose
            if not line.endswith("\\"):
                yield start, pending
                pending = ""
        else:
            prose.append((number, line))
    text = "\n".join(line for _, line in prose)
    for span in re.finditer(r"`([^`]+)`", text):
        yield prose[text.count("\n", 0, span.start())][0], span.group(1).replace("\n", " ")


def options_after(text: str, start: int) -> List[str]:
    end = COMMAND_END.search(text, start)
    return OPTION.findall(text[start:end.start() if end else len(text)])


@lru_cache(maxsize=None)
def script_options(script: str) -> Set[str]:
    """The option strings a script's argparse calls add (`add_argument("--x", ...)`)."""
    tree = ast.parse((REPO / script).read_text())
    calls = [node for node in ast.walk(tree)
             if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"]
    return {arg.value for call in calls for arg in call.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str)}


def cli_options() -> dict:
    context = click.Context(main)
    group = {opt for param in main.params for opt in param.opts + param.secondary_opts} | {"--help"}
    return {name: group | {opt for param in main.get_command(context, name).params
                           for opt in param.opts + param.secondary_opts}
            for name in main.list_commands(context)}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_shown_commands_name_real_options(page: Path) -> None:
    commands, problems = cli_options(), []
    for number, text in command_texts(page):
        for match in SHARDKIT.finditer(text):
            sub = match.group(1)
            if sub not in commands:
                problems.append(f"{page.name}:{number}: `shardkit {sub}` is no subcommand")
                continue
            problems += [f"{page.name}:{number}: `shardkit {sub}` has no {option}"
                         for option in options_after(text, match.end()) if option not in commands[sub]]
        for match in SCRIPT.finditer(text):
            script = match.group(1)
            if not (REPO / script).is_file():
                problems.append(f"{page.name}:{number}: {script} does not exist")
                continue
            problems += [f"{page.name}:{number}: {script} has no {option}"
                         for option in options_after(text, match.end()) if option not in script_options(script)]
    assert not problems, "\n".join(problems)


def test_the_commands_are_found() -> None:
    """The patterns above see the commands the pages show (a check that could not fail otherwise)."""
    found = [match.group(1) for page in PAGES for _, text in command_texts(page) for match in SCRIPT.finditer(text)]
    assert "benchmarks/many_shards.py" in found and "examples/ddp_train.py" in found
    subs = {match.group(1) for page in PAGES for _, text in command_texts(page) for match in SHARDKIT.finditer(text)}
    assert {"convert", "verify", "info", "bench", "merge", "demo"} <= subs
