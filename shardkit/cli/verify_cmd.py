"""shardkit verify DST [--quick | --deep] [--workers N] [--json] [--expect-manifest-sha256 HEX]."""
from __future__ import annotations

import sys

import click

from ..errors import UsageError
from ..ops.verification import verify
from .output import echo_json, report_options


@click.command("verify")
@click.argument("dst", type=click.Path())
@click.option("--quick", is_flag=True, help="Presence, sizes and sample counts only.")
@click.option("--deep", is_flag=True, help="Also every sample's CRC32 and that images decode.")
@report_options("Shards checked in parallel")
@click.option("--expect-manifest-sha256", "expected", metavar="HEX",
              help="The manifest_sha256 you got from a trusted source; any other manifest is a problem.")
def command(dst: str, quick: bool, deep: bool, workers: int, as_json: bool, quiet: bool, expected: str) -> None:
    """Check DST against its manifest; exit 1 if anything is wrong (every problem is listed).

    The hashes detect damage, not tampering: add --expect-manifest-sha256 for authenticity.
    """
    if quick and deep:
        raise UsageError("--quick and --deep are mutually exclusive; pick one")
    mode = "quick" if quick else "deep" if deep else "full"
    report = verify(dst, mode=mode, workers=workers, quiet=quiet or as_json,
                    expect_manifest_sha256=expected)
    if as_json:
        echo_json(report.to_dict())
    else:
        for problem in report.problems:
            click.echo(f"problem: {problem.message}", err=True)
        state = "OK" if report.ok else f"FAILED: {len(report.problems)} problem(s)"
        detail = f", {report.samples_checked} samples" if report.mode == "deep" else ""
        click.echo(f"{report.dst}: {state} ({report.mode} check of {report.shards_checked} shards{detail})")
    sys.exit(0 if report.ok else 1)
