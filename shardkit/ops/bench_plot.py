"""`shardkit bench --plot`: samples/s against DataLoader workers, drawn with matplotlib (optional)."""
from __future__ import annotations

from .bench import BenchReport
from ..errors import UsageError

INSTALL_HINT = "pip install matplotlib"


def require_matplotlib() -> None:
    """UsageError naming the install command when matplotlib is missing (checked before timing)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"--plot needs matplotlib, which is not installed: {INSTALL_HINT}") from None


def plot_report(report: BenchReport, path: str) -> None:
    """Write a PNG (or any format matplotlib infers from path) of samples/s per worker count."""
    require_matplotlib()
    from matplotlib.figure import Figure       # no pyplot: no GUI backend, no global state
    figure = Figure(figsize=(6.4, 4.0))
    axes = figure.subplots()
    workers = [result.num_workers for result in report.results]
    axes.plot(workers, [result.samples_per_s for result in report.results], marker="o", label=report.reads)
    if report.recommended_num_workers is not None:
        axes.axvline(report.recommended_num_workers, color="grey", linestyle=":", label="recommended")
    axes.set_xticks(workers)
    axes.set_xlabel("DataLoader num_workers")
    axes.set_ylabel("samples/s")
    axes.set_ylim(bottom=0)
    axes.set_title(f"{report.num_samples} {report.format} samples, batch_size={report.batch_size}, {report.cpus} CPUs")
    axes.grid(alpha=0.3)
    axes.legend()
    try:
        figure.savefig(path, dpi=100, bbox_inches="tight")
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot write the plot ({exc})", path=path) from None
