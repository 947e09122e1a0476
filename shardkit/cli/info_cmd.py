"""shardkit info DST [--json]."""
from __future__ import annotations

import click

from ..ops.info import info, render_info
from .output import echo_json


@click.command("info")
@click.argument("dst", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def command(dst: str, as_json: bool) -> None:
    """Show what DST holds (read from its manifest; no shard is opened)."""
    data = info(dst)
    if as_json:
        echo_json(data)
        return
    click.echo(render_info(data))
