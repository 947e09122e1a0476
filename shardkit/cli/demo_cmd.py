"""shardkit demo: draw a sample tree, convert, verify and read one shuffled epoch."""
from __future__ import annotations

import click

from ..formats import format_names
from ..options import DEFAULT_FORMAT


@click.command("demo")
@click.option("--dir", "workdir", type=click.Path(), default=None,
              help="Where to put the sample tree and dataset [default: a temporary folder].")
@click.option("--format", "format_", type=click.Choice(format_names()), default=DEFAULT_FORMAT, show_default=True)
@click.option("--images", type=click.IntRange(min=1), default=400, show_default=True,
              help="Sample images to draw (a folder per count, reused).")
def command(workdir: str, format_: str, images: int) -> None:
    """Run the built-in end-to-end demo on a generated image tree."""
    from ..ops.demo import run_demo
    run_demo(workdir, format_, images, echo=click.echo)
