"""shardkit convert SRC DST [options]: one click option per field of the option classes (options.py)."""
from __future__ import annotations

from typing import Any, Callable

import click

from ..option_types import OptionSpec
from ..options import option_specs
from ..units import format_size
from ..writing.conversion import convert
from ..writing.skip_log import describe_leftovers
from .output import echo_json

#: click's type for each kind of option value (options.KINDS); flags and switches are click's boolean flags.
_CLICK_TYPES = {"int": int, "float": float, "str": str, "path": click.Path(), "pair": (int, int), "list": str,
                "any": str}


def click_option(spec: OptionSpec) -> Callable[[Any], Any]:
    """The click option of one convert option. It passes None (or False) when not given, so the
    option classes apply their defaults and refuse only what was given; its help says the default."""
    flag = spec.flag
    names = [flag.spelling, *([flag.short] if flag.short else [])]
    shown = spec.shown_default()
    text = f"{flag.help} [default: {shown}]" if shown else flag.help
    settings: dict = {"help": text, "metavar": flag.metavar}
    if spec.kind == "flag":
        settings.update(is_flag=True, default=False)
    elif spec.kind == "switch":
        settings.update(default=None)
    else:
        settings.update(default=None, type=click.Choice(flag.choices) if flag.choices else _CLICK_TYPES[spec.kind])
    return click.option(*names, spec.name, **settings)


def convert_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate command with every convert option, in option_specs() order (but the Python-only ones)."""
    for spec in reversed(list(option_specs())):
        if spec.flag.cli:
            command = click_option(spec)(command)
    return command


@click.command("convert")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
@convert_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def command(src: str, dst: str, as_json: bool, **options: Any) -> None:
    """Convert SRC (image tree, CSV file or folder, or a shardkit dataset) into shards at DST.

    SRC may also be a tar or zip archive (read in place, never unpacked) or an s3://, gs:// or
    http(s):// URL of any of these (pip install 'shardkit[remote]').
    """
    options["quiet"] = options["quiet"] or as_json
    report = convert(src, dst, **options)
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
