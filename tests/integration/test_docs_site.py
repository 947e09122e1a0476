"""The documentation site builds with `mkdocs build --strict`: every nav page exists, every link
and anchor resolves, and the generated CLI and Python API references render."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_site_builds_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocs_click", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs extra is not installed: pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("convert", "verify", "info", "merge", "bench", "--samples-per-shard"):
        assert command in cli, f"the generated CLI reference lacks {command}"
    assert "Sentinel.UNSET" not in cli, "click's no-default marker leaks into the CLI reference"
    api = (site / "reference" / "python" / "index.html").read_text()
    for name in _public_names():
        assert re.search(rf'id="shardkit\.[\w.]*\b{name}"', api), f"the generated API reference lacks {name}"
    assert (site / "formats" / "hdf5" / "index.html").is_file(), "formats/ pages are not on the site"
    assert (site / "formats" / "manifest.schema.json").is_file()
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    figures = re.findall(r'src="\.\./(img/[\w-]+\.png)"', benchmarks)
    assert len(figures) >= 5, "the benchmarks page shows no figures"
    for figure in figures:
        assert (site / figure).is_file(), f"the benchmarks page shows {figure}, which the site lacks"


def _public_names() -> list:
    """What `import shardkit` offers (its __all__), less the version string."""
    import shardkit
    return [name for name in shardkit.__all__ if name != "__version__"]


def test_the_python_reference_lists_every_public_name() -> None:
    """docs/reference/python.md renders every name of shardkit.__all__ (the errors as one module)."""
    import shardkit
    import shardkit.errors
    listed = re.findall(r"^::: ([\w.]+)$", (REPO / "docs" / "reference" / "python.md").read_text(), re.M)
    covered = {path.rsplit(".", 1)[1] for path in listed}
    if "shardkit.errors" in listed:
        covered |= set(vars(shardkit.errors))
    missing = [name for name in _public_names() if name not in covered]
    assert not missing, f"docs/reference/python.md leaves out {missing}"
    for path in listed:
        module, _, name = path.rpartition(".")
        if name in shardkit.__all__:
            public, documented = getattr(shardkit, name), getattr(__import__(module, fromlist=[name]), name)
            assert public is documented, path


def test_readme_links_are_absolute_and_resolve() -> None:
    """README.md is also the PyPI page, where relative links break: every link is an absolute
    GitHub link to a file or folder of this repository (or another site)."""
    links = re.findall(r"\]\(([^)]+)\)", (REPO / "README.md").read_text())
    assert links
    prefix = re.compile(r"^https://github\.com/shardkit/shardkit/(blob|tree)/main/(.+)$")
    for link in links:
        assert link.startswith("https://"), f"README.md links {link!r}, which breaks on PyPI"
        match = prefix.match(link)
        if match:
            assert (REPO / match.group(2)).exists(), f"README.md links {link}, but {match.group(2)} does not exist"
