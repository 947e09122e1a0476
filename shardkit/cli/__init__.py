"""The `shardkit` command: a thin shell over the Python API (parse -> call -> render -> exit code)."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from ..errors import ShardkitError


class ShardkitGroup(click.Group):
    """Turns expected failures into one readable line and the documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        as_json = "--json" in [*getattr(ctx, "_protected_args", []), *ctx.args]   # before the command consumes them
        try:
            return super().invoke(ctx)
        except ShardkitError as exc:
            _fail(type(exc).__name__, str(exc), exc.exit_code, as_json, getattr(exc, "path", None))
        except click.UsageError as exc:     # click's own (bad choice, no such option): one line too
            hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None and not as_json else ""
            _fail("UsageError", exc.format_message() + hint, exc.exit_code, as_json)
        except KeyboardInterrupt:
            _fail("ConversionInterrupted", "interrupted", 130, as_json)


def _fail(kind: str, message: str, exit_code: int, as_json: bool, path: Any = None) -> None:
    """Print the error (one line, or a JSON object on stdout under --json) and exit with its code."""
    if as_json:
        click.echo(json.dumps({"ok": False, "error": {"type": kind, "message": message, "path": path,
                                                      "exit_code": exit_code}}, indent=2))
    else:
        click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(exit_code)


def one_line(text: str) -> str:
    """text with control characters (a newline in a file name, ...) and undecodable bytes escaped,
    so every message stays one readable line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


@click.group(cls=ShardkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shardkit", prog_name="shardkit")
def main() -> None:
    """Turn image and CSV trees into checksummed shards, verify them, and read them back fast."""


def _register() -> None:
    # No command does linear algebra in numpy. Without this, importing numpy starts OpenBLAS's
    # thread pool, and a process with a second thread spawns its shard writers instead of
    # forking them (runtime/workers.writer_start_method): a quarter second of start-up each.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from . import (bench_cmd, convert_cmd, demo_cmd, duplicates_cmd, info_cmd, merge_cmd, pull_cmd, push_cmd,
                   repair_cmd, verify_cmd)
    for module in (convert_cmd, verify_cmd, info_cmd, merge_cmd, push_cmd, pull_cmd, bench_cmd, demo_cmd,
                   duplicates_cmd, repair_cmd):
        main.add_command(module.command)


_register()
