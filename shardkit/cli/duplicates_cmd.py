"""shardkit duplicates DST [OTHER_DST ...] [--pixels] [--across] [--workers N] [--json]."""
from __future__ import annotations

import sys
from typing import List, Optional, Tuple

import click

from ..ops.duplicates import DuplicateGroup, DuplicatesReport, duplicates
from .output import echo_json, report_options

_TITLES = {"stored": "identical stored bytes", "pixels": "the same picture, stored differently"}


@click.command("duplicates")
@click.argument("dsts", nargs=-1, required=True, type=click.Path())
@click.option("--pixels", is_flag=True, help="Also compare decoded images (image datasets; decodes every image).")
@click.option("--across", is_flag=True, help="Only groups with samples of more than one dataset (leakage).")
@report_options("Processes reading samples")
def command(dsts: Tuple[str, ...], pixels: bool, across: bool, workers: Optional[int], as_json: bool,
            quiet: bool) -> None:
    """List samples with the same content within and across datasets; exit 1 if any are found.

    Stored bytes are compared always (by each sample's CRC32, then a BLAKE2b digest of the
    candidates' bytes); --pixels also finds the same picture encoded differently.
    """
    report = duplicates(list(dsts), pixels=pixels, across=across, workers=workers, quiet=quiet or as_json)
    if as_json:
        echo_json(report.to_dict())
    else:
        for group in report.groups:
            click.echo("\n".join(render_group(group)))
        for problem in report.problems:
            click.echo(f"problem: {problem}", err=True)
        click.echo(summary_line(report))
    sys.exit(0 if report.ok else 1)


def render_group(group: DuplicateGroup) -> List[str]:
    """A group as a header line and one aligned line per sample: dataset, index, key, class."""
    rows = [(member.dst, f"#{member.index}", member.key or "-",
             member.class_name if member.class_name is not None else str(member.label)) for member in group.members]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = [f"{_TITLES[group.match]}: {len(rows)} samples" + (" across datasets" if group.across else "")]
    lines += ["  " + "  ".join(value.ljust(width) for value, width in zip(row[:3], widths)) + f"  {row[3]}"
              for row in rows]
    return lines


def summary_line(report: DuplicatesReport) -> str:
    """One line: what was checked and what was found."""
    plural = "s" if len(report.datasets) > 1 else ""
    checked = f"{sum(report.samples)} samples of {len(report.datasets)} dataset{plural}"
    if not report.groups:
        found = "no duplicates" + (" across datasets" if report.across_only else "")
    else:
        across = sum(1 for group in report.groups if group.across)
        found = (f"{len(report.groups)} groups, {report.duplicates} duplicate samples"
                 + (f" ({across} groups across datasets)" if len(report.datasets) > 1 else ""))
    damaged = f"; {len(report.problems)} damaged or undecodable samples left out" if report.problems else ""
    return f"{checked}{' (stored bytes and pixels)' if report.pixels else ''}: {found}{damaged}"
