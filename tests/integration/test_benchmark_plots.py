"""The figures of docs/benchmarks.md are drawn by benchmarks/plot_tables.py from the page's own
tables: every figure the page shows is drawn (and committed), and a figure follows its table."""
from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

# matplotlib.pyplot is imported by the tests that draw, not at collection (a quarter second in
# every collecting process)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                reason="matplotlib is in the test extras")

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "benchmarks.md"


def plot(page: Path, out: Path) -> List[Tuple[str, str]]:
    """benchmarks/plot_tables.py's main on a page: (figure name, file) for each figure drawn."""
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    import plot_tables
    return plot_tables.main(["--page", str(page), "--out", str(out)])


def draw(page: Path, out: Path) -> Dict[str, bytes]:
    return {name: Path(path).read_bytes() for name, path in plot(page, out)}


def test_every_figure_the_page_shows_is_drawn_and_committed(tmp_path: Path) -> None:
    shown = set(re.findall(r"\(img/(bench-[\w-]+\.png)\)", PAGE.read_text()))
    drawn = draw(PAGE, tmp_path)
    assert shown == set(drawn), "the page shows figures the script does not draw, or the reverse"
    for name, data in drawn.items():
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, name
        assert (REPO / "docs" / "img" / name).is_file(), f"docs/img/{name} is not committed"


def test_a_figure_follows_its_table(tmp_path: Path) -> None:
    before = draw(PAGE, tmp_path / "before")
    text = PAGE.read_text()
    marked = text.index("<!-- table: many-shards -->")
    ratio = re.compile(r"^\| hdf5 \| ratio \| \*\*[\d.]+x\*\*", re.M)
    row = ratio.search(text, marked)
    assert row, "the many-shards table has no hdf5 ratio row"
    changed = tmp_path / "benchmarks.md"
    changed.write_text(text[:row.start()] + "| hdf5 | ratio | **3.50x**" + text[row.end():])
    after = draw(changed, tmp_path / "after")
    assert after["bench-many-shards.png"] != before["bench-many-shards.png"]
    assert after["bench-formats.png"] == before["bench-formats.png"]


def test_a_marker_must_sit_above_a_table(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    shutil.copy(PAGE, page)
    page.write_text(page.read_text().replace("<!-- table: verify -->", "<!-- table: verify -->\n\nSome words.\n", 1))
    with pytest.raises(SystemExit, match="'verify' is not above a table"):
        plot(page, tmp_path / "out")
