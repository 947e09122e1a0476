"""shardkit pull URL DST [--in-flight N] [--json] [--quiet]."""
from __future__ import annotations

from typing import Optional

import click

from ..ops.pull import pull
from .output import echo_json


@click.command("pull")
@click.argument("url")
@click.argument("dst", type=click.Path())
@click.option("--in-flight", type=click.IntRange(min=1), default=None,
              help="Downloads at once [default: 8].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def command(url: str, dst: str, in_flight: Optional[int], as_json: bool, quiet: bool) -> None:
    """Copy the dataset at URL into DST, checking each shard's size and sha256 before it is kept.

    Run it again after an interruption: shards already in place are checked, not fetched again.
    """
    report = pull(url, dst, in_flight=in_flight, quiet=quiet or as_json)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(f"pulled {report.url} into {report.dst}: {report.fetched} shards fetched "
                   f"({report.bytes_fetched} bytes), {report.reused} already in place, in {report.seconds:.1f} s")
