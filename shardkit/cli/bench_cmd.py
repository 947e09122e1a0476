"""shardkit bench DST [--num-workers 0,1,2,4] [--batch-size 256] [--decode] [--seconds S] [--json] [--plot F]."""
from __future__ import annotations

from typing import Optional

import click

from ..ops.bench import BenchResult, bench, parse_worker_counts
from ..ops.bench_plot import plot_report, require_matplotlib
from .output import echo_json


@click.command("bench")
@click.argument("dst", type=click.Path())
@click.option("--num-workers", "num_workers", default="0,1,2,4", show_default=True,
              help="DataLoader worker counts to try, separated by commas.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--decode", is_flag=True,
              help="Decode images (resized to 224x224 tensors, batches stacked) instead of reading stored bytes.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
              help="How long each setting is timed, after its first batch.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
              help="Also draw samples/s against workers into FILE (needs matplotlib).")
def command(dst: str, num_workers: str, batch_size: int, decode: bool, seconds: float, as_json: bool,
            quiet: bool, plot: Optional[str]) -> None:
    """Time reading DST through a DataLoader for each worker count, and recommend a setting."""
    counts = parse_worker_counts(num_workers)
    if plot:
        require_matplotlib()

    def show(result: BenchResult) -> None:
        if not as_json:
            click.echo(f"num_workers={result.num_workers:<3} {result.samples_per_s:10,.0f} samples/s "
                       f"{result.mb_per_s:9,.1f} MB/s   first batch after {result.first_batch_s:.2f}s")

    report = bench(dst, num_workers=counts, batch_size=batch_size, decode=decode, seconds=seconds,
                   quiet=quiet or as_json, on_result=show)
    if plot:
        plot_report(report, plot)
    if as_json:
        echo_json(report.to_dict())
        return
    click.echo(f"{report.dst}: {report.num_samples} {report.format} samples, {report.reads}, "
               f"batch_size={report.batch_size}, {report.cpus} CPUs")
    click.echo(f"recommended: {report.recommendation}")
    if plot:
        click.echo(f"plot: {plot}")
