"""shardkit merge PART_DST... DST."""
from __future__ import annotations

import click

from ..ops.merging import merge
from .output import echo_json


@click.command("merge")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(paths: tuple, as_json: bool) -> None:
    """Join the part datasets of a `convert --part I/N` run (all N of them) into DST, the last path."""
    if len(paths) < 2:
        raise click.UsageError("give the part datasets and then DST")
    report = merge(list(paths[:-1]), paths[-1])
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(f"merged {report.parts} parts: {report.num_samples} samples in {report.num_shards} shards "
                   f"({report.linked} hard-linked, {report.copied} copied) into {report.dst}")
