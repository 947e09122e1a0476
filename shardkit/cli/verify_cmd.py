"""shardkit verify DST [--quick | --deep] [--workers N] [--json]."""
from __future__ import annotations

import json
import sys

import click

from ..errors import UsageError
from ..verification import verify


@click.command("verify")
@click.argument("dst", type=click.Path())
@click.option("--quick", is_flag=True, help="Presence, sizes and sample counts only.")
@click.option("--deep", is_flag=True, help="Also every sample's CRC32 and that images decode.")
@click.option("--workers", type=int, default=1, show_default=True, help="Shards checked in parallel.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def command(dst: str, quick: bool, deep: bool, workers: int, as_json: bool, quiet: bool) -> None:
    """Check DST against its manifest; exit 1 if anything is wrong (every problem is listed)."""
    if quick and deep:
        raise UsageError("--quick and --deep are mutually exclusive; pick one")
    mode = "quick" if quick else "deep" if deep else "full"
    report = verify(dst, mode=mode, workers=workers, quiet=quiet or as_json)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for problem in report.problems:
            click.echo(f"problem: {problem.message}", err=True)
        state = "OK" if report.ok else f"FAILED: {len(report.problems)} problem(s)"
        detail = f", {report.samples_checked} samples" if report.mode == "deep" else ""
        click.echo(f"{report.dst}: {state} ({report.mode} check of {report.shards_checked} shards{detail})")
    sys.exit(0 if report.ok else 1)
