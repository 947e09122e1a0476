"""shardkit info DST [--json]."""
from __future__ import annotations

import json

import click

from ..info import info, render_info


@click.command("info")
@click.argument("dst", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def command(dst: str, as_json: bool) -> None:
    """Show what DST holds (read from its manifest; no shard is opened)."""
    data = info(dst)
    click.echo(json.dumps(data, indent=2) if as_json else render_info(data))
