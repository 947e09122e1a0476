"""shardkit push DST URL [--overwrite] [--in-flight N] [--json] [--quiet]."""
from __future__ import annotations

from typing import Optional

import click

from ..ops.push import push
from .output import echo_json


@click.command("push")
@click.argument("dst", type=click.Path())
@click.argument("url")
@click.option("--overwrite", is_flag=True, help="Replace another dataset at URL (its manifest goes first).")
@click.option("--in-flight", type=click.IntRange(min=1), default=None,
              help="Uploads at once [default: 8].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def command(dst: str, url: str, overwrite: bool, in_flight: Optional[int], as_json: bool, quiet: bool) -> None:
    """Copy the dataset DST to URL (s3://, gs://, ...): verified first, shards before the manifest.

    Credentials come from the store's usual places (environment, config files, instance roles).
    """
    report = push(dst, url, overwrite=overwrite, in_flight=in_flight, quiet=quiet or as_json)
    if as_json:
        echo_json(report.to_dict())
    elif report.uploaded == 0:
        click.echo(f"{report.url} already holds this dataset ({report.num_shards} shards); nothing to send")
    else:
        click.echo(f"pushed {report.uploaded} files ({report.bytes_uploaded} bytes) and the manifest to {report.url} "
                   f"in {report.seconds:.1f} s" + (", replacing the dataset there" if report.replaced else ""))
