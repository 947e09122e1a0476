"""shardkit convert SRC DST [options]."""
from __future__ import annotations

import json
from typing import Any, Optional, Tuple

import click

from ..conversion import convert
from ..units import format_size


@click.command("convert")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--format", "format_", default="hdf5", show_default=True, help="hdf5, lmdb or pt.")
@click.option("--shard-size", default=None, help="Upper bound per shard, e.g. 256MB or 1GiB [default: 256MB].")
@click.option("--samples-per-shard", type=int, default=None, help="Upper bound of samples per shard.")
@click.option("--image-mode", default="passthrough", show_default=True,
              help="passthrough, jpeg, png, webp or raw.")
@click.option("--resize", type=int, default=None, help="Shorter side in pixels (jpeg/png/webp).")
@click.option("--size", type=(int, int), default=None, metavar="H W", help="Array size for --image-mode raw.")
@click.option("--quality", type=int, default=None, help="Encoder quality for jpeg/webp.")
@click.option("--background", default="#ffffff", show_default=True, help="Colour behind transparent pixels.")
@click.option("--compression", default="none", show_default=True, help="none, gzip or lzf.")
@click.option("--compression-level", type=int, default=None, help="gzip level 0-9.")
@click.option("--labels", type=click.Path(), default=None, help="CSV with a path and a label column.")
@click.option("--path-column", default=None, help="Path column of --labels [default: path].")
@click.option("--label-column", default=None, help="Label column of --labels or of a CSV source.")
@click.option("--no-labels", is_flag=True, help="Unlabeled samples.")
@click.option("--delimiter", default=None, help="CSV delimiter (sniffed when omitted).")
@click.option("--columns", default=None, help="CSV: comma-separated columns to keep.")
@click.option("--text-columns", default=None, help="CSV: comma-separated columns kept as UTF-8 text.")
@click.option("--schema", "schema_file", type=click.Path(), default=None, help="CSV: JSON schema overriding inference.")
@click.option("--readahead/--no-readahead", default=None, help="LMDB/HDF5 readers: OS readahead (default by size).")
@click.option("--order", type=click.Choice(["shuffled", "source"]), default=None,
              help="Sample order: a seeded shuffle, or source order [default: shuffled; CSV tables: source].")
@click.option("--seed", type=int, default=None, help="Seed of --order shuffled [default: 0].")
@click.option("--workers", type=int, default=1, show_default=True,
              help="Processes writing shards (and parsing the files of a CSV tree) in parallel.")
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip", show_default=True)
@click.option("--max-errors", type=int, default=None, help="Fail once more than N inputs were skipped.")
@click.option("--resume", is_flag=True, help="Continue an interrupted conversion into DST.")
@click.option("--overwrite", is_flag=True, help="Replace the dataset already in DST.")
@click.option("--part", default=None, metavar="I/N", help="Convert only part I of N (whole shards).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(src: str, dst: str, format_: str, columns: Optional[str], text_columns: Optional[str],
            size: Optional[Tuple[int, int]], as_json: bool, **options: Any) -> None:
    """Convert SRC (image tree, CSV file or folder, or a shardkit dataset) into shards at DST."""
    report = convert(src, dst, format=format_, size=size or None,
                     columns=_split(columns), text_columns=_split(text_columns), **options)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    reused = f", {report.shards_reused} reused" if report.shards_reused else ""
    click.echo(f"wrote {report.num_samples} samples in {report.num_shards} {report.format} shards{reused} "
               f"({format_size(report.bytes_written)}) to {report.dst} in {report.seconds:.1f}s "
               f"({report.samples_per_second:.0f} samples/s); skipped {report.skipped}"
               + (" (see skipped.jsonl)" if report.skipped else ""))


def _split(text: Optional[str]) -> Optional[list]:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None
