"""shardkit demo: draw a sample tree, convert, verify and read one shuffled epoch."""
from __future__ import annotations

import click


@click.command("demo")
@click.option("--dir", "workdir", type=click.Path(), default=None,
              help="Where to put the sample tree and dataset [default: a temporary folder].")
@click.option("--format", "format_", default="hdf5", show_default=True)
@click.option("--images", type=int, default=400, show_default=True)
def command(workdir: str, format_: str, images: int) -> None:
    """Run the built-in end-to-end demo on a generated image tree."""
    from ..demo import run_demo
    run_demo(workdir, format_, images, echo=click.echo)
