"""shardkit repair DST --from SRC [--from NEW_SRC ...] [--workers N] [--json] [--quiet]."""
from __future__ import annotations

from typing import Tuple

import click

from ..writing.repair_run import repair
from .output import echo_json, report_options


@click.command("repair")
@click.argument("dst", type=click.Path())
@click.option("--from", "src", required=True, multiple=True, type=click.Path(), metavar="SRC",
              help="The inputs DST was converted from (the same files; they may have moved); again for "
                   "each `convert --append` NEW_SRC, in order, to repair appended shards.")
@report_options("Processes parsing the files of a CSV tree")
def command(dst: str, src: Tuple[str, ...], workers: int, as_json: bool, quiet: bool) -> None:
    """Write again DST's missing or damaged shards from SRC, byte-identical to the conversion.

    The options come from DST's manifest; every shard written again must match the manifest's
    sha256 before it replaces anything, so a SRC that changed is refused and DST left as it was.
    """
    report = repair(dst, list(src), workers=workers, quiet=quiet or as_json)
    if as_json:
        echo_json(report.to_dict())
        return
    for line in report.repaired:
        click.echo(f"repaired: {line}")
    state = f"{report.shards_written} of {report.num_shards} shards written again" if report.repaired \
        else f"nothing to repair ({report.num_shards} shards intact)"
    click.echo(f"{report.dst}: {state}")
