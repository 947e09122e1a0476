"""Draw the figures of docs/benchmarks.md from the tables on that page.

Each figure reads tables the page marks with an HTML comment on its own line above them,
`<!-- table: NAME -->`. Replacing a table with a new run's output (the marker kept) and running
this script redraws its figure, so a figure never shows other numbers than its table. Needs
matplotlib (in the test extras).

    python benchmarks/plot_tables.py [--page docs/benchmarks.md] [--out docs/img]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!--\s*table:\s*([\w-]+)\s*-->$")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


class Table:
    """A markdown table: its header cells and rows of cells, bold marks removed."""

    def __init__(self, header: List[str], rows: List[List[str]]) -> None:
        self.header, self.rows = header, rows

    def column(self, name: str, nth: int = 0) -> int:
        """The index of the nth column whose header starts with name."""
        found = [i for i, cell in enumerate(self.header) if cell.startswith(name)]
        if len(found) <= nth:
            raise SystemExit(f"no column {name!r} in a table with {self.header}")
        return found[nth]

    def where(self, column: int, value: str) -> List[List[str]]:
        return [row for row in self.rows if row[column] == value]


def split_row(line: str) -> List[str]:
    return [cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")]


def read_tables(page: str) -> Dict[str, Table]:
    """Every marked table of the page, by its marker's name."""
    lines = open(page, encoding="utf-8").read().split("\n")
    tables: Dict[str, Table] = {}
    for number, line in enumerate(lines):
        match = MARKER.match(line.strip())
        if not match:
            continue
        start = next(i for i in range(number + 1, len(lines)) if lines[i].strip())
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        if end - start < 3:
            raise SystemExit(f"{page}:{number + 1}: the marker {match.group(1)!r} is not above a table")
        tables[match.group(1)] = Table(split_row(lines[start]), [split_row(row) for row in lines[start + 2:end]])
    return tables


def numbers(cell: str) -> List[float]:
    """Every number in a cell: "1,021,098" -> [1021098.0]; "1.09 / 1.07" -> [1.09, 1.07];
    "0.92 (0.71-1.06)" -> [0.92, 0.71, 1.06] (no table plotted holds a negative number)."""
    return [float(text.replace(",", "")) for text in NUMBER.findall(cell)]


def first(cell: str) -> Optional[float]:
    found = numbers(cell)
    return found[0] if found else None


def finish(figure: plt.Figure, path: str) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def grouped_bars(axis: plt.Axes, groups: Sequence[str], series: Dict[str, List[Optional[float]]],
                 reference: Optional[float] = None) -> None:
    """Bars of each series side by side in every group; a dashed line at reference."""
    width = 0.8 / max(len(series), 1)
    for n, (name, values) in enumerate(series.items()):
        places = [g + (n - (len(series) - 1) / 2) * width for g in range(len(groups))]
        axis.bar(places, [v if v is not None else 0.0 for v in values], width, label=name.replace("`", ""))
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels(groups, rotation=20, ha="right")
    if reference is not None:
        axis.axhline(reference, color="black", linestyle="--", linewidth=0.8)
    axis.legend(fontsize=8)


def plot_formats(tables: Dict[str, Table], path: str) -> None:
    reads, misses = tables["formats-reads"], tables["formats-misses"]
    names = [row[0] for row in reads.rows]
    warm = {row[0]: first(row[reads.column("warm")]) for row in reads.rows}
    cold = {row[0]: first(row[reads.column("cold")]) for row in reads.rows}
    miss = {row[0]: first(row[misses.column("samples/s")]) for row in misses.rows}

    def against_hdf5(values: Dict[str, Optional[float]]) -> List[Optional[float]]:
        base = values.get("hdf5")
        return [values[n] / base if values.get(n) is not None and base else None for n in names]

    figure, axis = plt.subplots(figsize=(8, 4))
    grouped_bars(axis, names, {"warm": against_hdf5(warm), "cold, first epoch": against_hdf5(cold),
                               "every read a cache miss": against_hdf5(miss)}, reference=1.0)
    axis.set_ylabel("samples/s against hdf5")
    axis.set_title("Random reads of stored bytes, 2 GB of JPEGs")
    finish(figure, path)


def interval_bars(axis: plt.Axes, labels: List[str], cells: List[str], title: str) -> None:
    """Horizontal bars of "median (p25-p75)" cells, with the quartiles as whiskers."""
    values = [numbers(cell) for cell in cells]
    medians = [v[0] for v in values]
    low = [v[0] - v[1] if len(v) == 3 else 0.0 for v in values]
    high = [v[2] - v[0] if len(v) == 3 else 0.0 for v in values]
    axis.barh(range(len(labels)), medians, xerr=[low, high], color="tab:blue", ecolor="gray")
    axis.set_yticks(range(len(labels)))
    axis.set_yticklabels(labels, fontsize=8)
    axis.axvline(1.0, color="black", linestyle="--", linewidth=0.8)
    axis.set_title(title, fontsize=10)


def plot_read_throughput(tables: Dict[str, Table], path: str) -> None:
    table = tables["read-throughput"]
    labels = [row[0] for row in table.rows]
    figure, (wall, cpu) = plt.subplots(1, 2, figsize=(10, 4.5), sharey=True)
    interval_bars(wall, labels, [row[table.column("warm x (b)")] for row in table.rows],
                  "samples/s against the mmap floor (b)")
    interval_bars(cpu, labels, [row[table.column("CPU x (b)")] for row in table.rows],
                  "CPU per sample: the floor's over this one")
    wall.invert_yaxis()           # the table's order, top down (the axes share it)
    finish(figure, path)


def plot_image_modes(tables: Dict[str, Table], path: str) -> None:
    table = tables["image-modes"]
    size, rate, mode = table.column("bytes/sample"), table.column("read samples/s"), table.column("mode")
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for row in table.rows:
        if first(row[size]) is None:
            axis.axhline(first(row[rate]), color="tab:red", linestyle="--", linewidth=0.8)
            axis.annotate("1000-sample-chunk h5py recipe", (0, first(row[rate])), fontsize=8, color="tab:red",
                          xytext=(5, 4), textcoords="offset points")
            continue
        axis.scatter(first(row[size]) / 1000, first(row[rate]), color="tab:blue")
        axis.annotate(row[mode], (first(row[size]) / 1000, first(row[rate])), fontsize=8,
                      xytext=(5, 4), textcoords="offset points")
    axis.set_yscale("log")
    axis.set_xlim(0, axis.get_xlim()[1] * 1.15)
    axis.set_xlabel("KB stored per sample")
    axis.set_ylabel("random reads, samples/s (log)")
    axis.set_title("Image modes: bytes against read rate, 3x224x224 tensors out")
    finish(figure, path)


def plot_convert_images(tables: Dict[str, Table], path: str) -> None:
    table = tables["convert-images-ratios"]
    rows = [row for row in table.rows if not row[0].startswith("(")]
    needed = table.column("needed")
    figure, axis = plt.subplots(figsize=(8, 4))
    series = {}
    for label, column, part in (("small, wall", 1, 0), ("small, CPU", 1, 1), ("photos, wall", 2, 0),
                                ("photos, CPU", 2, 1)):
        series[label] = [numbers(row[column])[part] for row in rows]
    grouped_bars(axis, [row[0].replace("`", "") for row in rows], series)
    for n, row in enumerate(rows):
        if first(row[needed]) is not None:
            axis.hlines(first(row[needed]), n - 0.45, n + 0.45, color="black", linewidth=1.5)
    axis.set_ylabel("ratio (black: the goal)")
    axis.set_title("Image conversion against its baselines")
    finish(figure, path)


def plot_tables_floor(tables: Dict[str, Table], path: str) -> None:
    table = tables["tables-floor"]
    methods = ["pyarrow 1 thread", "integrity floor", "shardkit", "shardkit --workers 2"]
    columns = {method: table.column(method) for method in methods}
    columns["shardkit"] = table.header.index("shardkit")
    figure, axis = plt.subplots(figsize=(8, 4))
    series = {method: [statistics.mean(numbers(row[column])) if numbers(row[column]) else None
                       for row in table.rows] for method, column in columns.items()}
    grouped_bars(axis, [row[0] for row in table.rows], series)
    axis.set_ylabel("CPU seconds (mean of the runs)")
    axis.set_title("Converting 500,000 rows: Arrow's read, the integrity floor, shardkit")
    finish(figure, path)


def ratio_bars(tables: Dict[str, Table], path: str, columns: Sequence[str], title: str) -> None:
    """The "ratio" rows of the many-shards table, for the given columns, one bar per format."""
    table = tables["many-shards"]
    rows = table.where(table.column("shards"), "ratio")
    figure, axis = plt.subplots(figsize=(8, 4))
    grouped_bars(axis, list(columns), {row[0]: [first(row[table.header.index(c)]) for c in columns] for row in rows},
                 reference=1.0)
    axis.set_ylabel("rate at 10,000 shards / at 100")
    axis.set_title(title)
    finish(figure, path)


def plot_many_shards(tables: Dict[str, Table], path: str) -> None:
    ratio_bars(tables, path, ["uniform /s", "decoded /s", "sampler /s"],
               "One process: the same rows in 10,000 shards against 100")


def plot_loader(tables: Dict[str, Table], path: str) -> None:
    ratio_bars(tables, path, ["loader, first epoch /s", "loader /s", "loader, unplaced /s", "persistent loader /s"],
               "DataLoader, 2 workers: the same rows in 10,000 shards against 100")


def plot_verify(tables: Dict[str, Table], path: str) -> None:
    table = tables["verify"]
    rows = [row for row in table.rows if row[1] != "100"]
    figure, axis = plt.subplots(figsize=(7, 4))
    grouped_bars(axis, [f"{row[0]}, {row[1]} shards" for row in rows],
                 {name: [first(row[table.column(name)]) for row in rows]
                  for name in ("hash", "full, `--workers 1`", "full, `--workers 2`")})
    axis.set_ylabel("seconds")
    axis.set_title("10,000 shards: a full verify against sha256 of the same files")
    finish(figure, path)


def plot_security(tables: Dict[str, Table], path: str) -> None:
    table = tables["security"]
    fmt, measure, ratio = table.column("format"), table.column("measure"), table.column("CPU ratio")
    measures = list(dict.fromkeys(row[measure] for row in table.rows))
    formats = list(dict.fromkeys(row[fmt] for row in table.rows))
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for n, name in enumerate(formats):
        for row in table.where(fmt, name):
            median, low, high = numbers(row[ratio])[:3]
            y = measures.index(row[measure]) + (n - 1) * 0.22
            axis.errorbar(median, y, xerr=[[median - low], [high - median]], fmt="o", color=f"C{n}",
                          label=name if row is table.where(fmt, name)[0] else None)
    axis.set_yticks(range(len(measures)))
    axis.set_yticklabels([m.replace("`", "") for m in measures], fontsize=8)
    axis.invert_yaxis()
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.axvline(1.05, color="tab:red", linestyle="--", linewidth=0.8)
    axis.set_xlabel("CPU time with the checks / without (median, interquartile range); red: +5%")
    axis.legend(fontsize=8)
    finish(figure, path)


FIGURES: Dict[str, Callable[[Dict[str, Table], str], None]] = {
    "bench-formats.png": plot_formats,
    "bench-read-throughput.png": plot_read_throughput,
    "bench-image-modes.png": plot_image_modes,
    "bench-convert-images.png": plot_convert_images,
    "bench-tables.png": plot_tables_floor,
    "bench-many-shards.png": plot_many_shards,
    "bench-loader.png": plot_loader,
    "bench-verify.png": plot_verify,
    "bench-security.png": plot_security,
}


def main(argv: Optional[Sequence[str]] = None) -> List[Tuple[str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--page", default=os.path.join(REPO, "docs", "benchmarks.md"))
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "img"))
    args = parser.parse_args(argv)
    tables = read_tables(args.page)
    os.makedirs(args.out, exist_ok=True)
    written = []
    for name, draw in FIGURES.items():
        draw(tables, os.path.join(args.out, name))
        written.append((name, os.path.join(args.out, name)))
        print(os.path.join(args.out, name))
    return written


if __name__ == "__main__":
    main()
