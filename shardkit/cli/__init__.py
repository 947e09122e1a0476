"""The `shardkit` command: a thin shell over the Python API (parse -> call -> render -> exit code)."""
from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import ShardkitError


class ShardkitGroup(click.Group):
    """Turns expected failures into one readable line and the documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ShardkitError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            sys.exit(130)


@click.group(cls=ShardkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shardkit", prog_name="shardkit")
def main() -> None:
    """Turn image and CSV trees into checksummed shards, verify them, and read them back fast."""


def _register() -> None:
    from . import bench_cmd, convert_cmd, demo_cmd, info_cmd, merge_cmd, verify_cmd
    for module in (convert_cmd, verify_cmd, info_cmd, merge_cmd, bench_cmd, demo_cmd):
        main.add_command(module.command)


_register()
