"""shardkit verify DST [--quick | --deep] [--workers N] [--json]."""
from __future__ import annotations

import json
import sys

import click

from ..verification import verify


@click.command("verify")
@click.argument("dst", type=click.Path())
@click.option("--quick", "mode", flag_value="quick", help="Presence, sizes and sample counts only.")
@click.option("--deep", "mode", flag_value="deep", help="Also every sample's CRC32 and that images decode.")
@click.option("--workers", type=int, default=None,
              help="Shards checked in parallel [default: $SHARDKIT_WORKERS, else the CPUs this process may use].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def command(dst: str, mode: str, workers: int, as_json: bool, quiet: bool) -> None:
    """Check DST against its manifest; exit 1 if anything is wrong (every problem is listed)."""
    report = verify(dst, mode=mode or "full", workers=workers, quiet=quiet or as_json)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for problem in report.problems:
            click.echo(f"problem: {problem.message}", err=True)
        state = "OK" if report.ok else f"FAILED: {len(report.problems)} problem(s)"
        detail = f", {report.samples_checked} samples" if report.mode == "deep" else ""
        click.echo(f"{report.dst}: {state} ({report.mode} check of {report.shards_checked} shards{detail})")
    sys.exit(0 if report.ok else 1)
