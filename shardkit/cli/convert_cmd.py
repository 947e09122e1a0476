"""shardkit convert SRC DST [options]."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import click

from ..codecs.image import IMAGE_MODES

from ..codecs.pillow import DEFAULT_MAX_IMAGE_PIXELS
from ..codecs.validate import DEFAULT_VALIDATE, VALIDATE_MODES
from ..write.conversion import convert
from ..write.skip_log import describe_leftovers
from ..formats import format_names
from ..options import DEFAULT_BACKGROUND, DEFAULT_COMPRESSION, DEFAULT_FORMAT, DEFAULT_IMAGE_MODE, EXECUTORS
from ..schema import COMPRESSIONS
from ..units import format_size
from .output import echo_json


@click.command("convert")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@click.option("--format", "format_", type=click.Choice(format_names()), default=DEFAULT_FORMAT, show_default=True,
              help="Shard format.")
@click.option("--shard-size", default=None, help="Upper bound per shard, e.g. 256MB or 1GiB [default: 256MB].")
@click.option("--samples-per-shard", type=int, default=None, help="Upper bound of samples per shard.")
@click.option("--image-mode", type=click.Choice(IMAGE_MODES), default=None,
              help=f"How images are stored [default: {DEFAULT_IMAGE_MODE}].")
@click.option("--resize", type=int, default=None, help="Shorter side in pixels (jpeg/png/webp).")
@click.option("--size", type=(int, int), default=None, metavar="H W", help="Array size for --image-mode raw.")
@click.option("--quality", type=int, default=None, help="Encoder quality for jpeg/webp.")
@click.option("--background", default=None, help=f"Colour behind transparent pixels [default: {DEFAULT_BACKGROUND}].")
@click.option("--validate", type=click.Choice(VALIDATE_MODES), default=None,
              help=f"passthrough: decode every image (full), check headers and end markers (fast), "
                   f"or only sniff the format (none) [default: {DEFAULT_VALIDATE}].")
@click.option("--max-image-pixels", type=int, default=None, metavar="N",
              help=f"Refuse images of more than N pixels, from their header, before decoding; recorded "
                   f"in the manifest and applied by verify --deep and readers [default: {DEFAULT_MAX_IMAGE_PIXELS}].")
@click.option("--compression", type=click.Choice(COMPRESSIONS), default=None,
              help=f"Storage compression [default: {DEFAULT_COMPRESSION}].")
@click.option("--compression-level", type=int, default=None, help="gzip level 0-9.")
@click.option("--labels", type=click.Path(), default=None, help="CSV with a path and a label column.")
@click.option("--path-column", default=None, help="Path column of --labels [default: path].")
@click.option("--label-column", default=None, help="Label column of --labels or of a CSV source.")
@click.option("--no-labels", is_flag=True, help="Unlabeled samples.")
@click.option("--delimiter", default=None, help="CSV delimiter (sniffed when omitted).")
@click.option("--decimal", default=None, help="CSV/TSV: decimal mark of numbers, '.' (default) or ','.")
@click.option("--max-inflation", type=float, default=None,
              help="Compressed tables: inflate to at most N times the file's size [default: 200; 0: no limit].")
@click.option("--columns", default=None, help="CSV: comma-separated columns to keep.")
@click.option("--text-columns", default=None, help="CSV: comma-separated columns kept as UTF-8 text.")
@click.option("--drop-columns", default=None, help="Tables: comma-separated columns to leave out (the rest are kept).")
@click.option("--schema", "schema_file", type=click.Path(), default=None, help="CSV: JSON schema overriding inference.")
@click.option("--classes", default=None, metavar="A,B",
              help="Re-sharding: keep these classes only (comma-separated), relabelled 0..k-1 in their old order.")
@click.option("--keys", type=click.Path(), default=None, metavar="FILE",
              help="Re-sharding: keep the samples whose keys the file lists, one per line.")
@click.option("--fraction", type=float, default=None, metavar="F",
              help="Re-sharding: keep a fraction F of each class, chosen by --seed.")
@click.option("--readahead/--no-readahead", default=None, help="LMDB/HDF5 readers: OS readahead (default by size).")
@click.option("--order", type=click.Choice(["shuffled", "source"]), default=None,
              help="Sample order: a seeded shuffle, or source order [default: shuffled; CSV tables: source].")
@click.option("--seed", type=int, default=None, help="Seed of --order shuffled and of --fraction [default: 0].")
@click.option("--workers", type=int, default=None,
              help="Processes writing shards (and parsing the files of a CSV tree) in parallel "
                   "[default: $SHARDKIT_WORKERS, else the CPUs this process may use].")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Write shards in local processes, or as Ray tasks (pip install 'shardkit[ray]').")
@click.option("--address", default=None, metavar="auto|HOST:PORT",
              help="--executor ray: the cluster to use [default: start a local Ray].")
@click.option("--on-error", type=click.Choice(["skip", "fail"]), default="skip", show_default=True)
@click.option("--max-errors", type=int, default=None, help="Fail once more than N inputs were skipped.")
@click.option("--resume", is_flag=True, help="Continue an interrupted conversion into DST.")
@click.option("--overwrite", is_flag=True, help="Replace the dataset already in DST.")
@click.option("--part", default=None, metavar="I/N", help="Convert only part I of N (whole shards).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(src: str, dst: str, format_: str, columns: Optional[str], text_columns: Optional[str],
            classes: Optional[str], size: Optional[Tuple[int, int]], as_json: bool, **options: Any) -> None:
    """Convert SRC (image tree, CSV file or folder, or a shardkit dataset) into shards at DST."""
    options["quiet"] = options["quiet"] or as_json
    report = convert(src, dst, format=format_, size=size or None,
                     columns=_split(columns), text_columns=_split(text_columns), classes=_split(classes), **options)
    if as_json:
        echo_json(report.to_dict())
        return
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    reused = f", {report.shards_reused} reused" if report.shards_reused else ""
    click.echo(f"wrote {report.num_samples} samples in {report.num_shards} {report.format} shards{reused} "
               f"({format_size(report.bytes_written)}) to {report.dst} in {report.seconds:.1f}s "
               f"({report.samples_per_second:.0f} samples/s); "
               + describe_leftovers(report.skipped, report.skipped_by_reason, report.ignored_by_extension))


def _split(text: Optional[str]) -> Optional[list]:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None
