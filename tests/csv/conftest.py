"""Helpers for the CSV source tests: write CSV files, convert them, read every row back."""
from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path
from typing import Any, Callable, List, Sequence

import pytest

import shardkit


def write_rows(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]], **kwargs: Any) -> Path:
    """A CSV written by Python's csv module (quoting what needs quoting)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, **kwargs)
        writer.writerow(header)
        writer.writerows(rows)
    return path


@pytest.fixture
def make_csv(tmp_path: Path) -> Callable[..., Path]:
    """make_csv(name, header, rows, **csv.writer options) -> path of the new file under tmp_path."""
    def make(name: str, header: Sequence[str], rows: Sequence[Sequence[Any]], **kwargs: Any) -> Path:
        return write_rows(tmp_path / name, header, rows, **kwargs)
    return make


@pytest.fixture
def convert_csv(tmp_path: Path) -> Callable[..., shardkit.ShardDataset]:
    """convert_csv(src, fmt, **convert options) -> the opened dataset (DST is a fresh folder)."""
    counter = [0]

    def run(src: Any, fmt: str = "hdf5", open_kwargs: Any = None, **options: Any) -> shardkit.ShardDataset:
        counter[0] += 1
        dst = tmp_path / f"dst{counter[0]}"
        options.setdefault("quiet", True)
        shardkit.convert(str(src), str(dst), format=fmt, **options)
        return shardkit.open_dataset(str(dst), **(open_kwargs or {}))
    return run


def skipped_lines(dst: Any) -> List[dict]:
    """The parsed lines of DST/skipped.jsonl."""
    text = (Path(dst) / "skipped.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


@pytest.fixture
def read_skipped() -> Callable[[Any], List[dict]]:
    """read_skipped(dst) -> the skipped.jsonl entries."""
    return skipped_lines


@pytest.fixture
def spill_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temporary directory for the spill folders made in this process."""
    home = tmp_path / "tmp"
    home.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(home))
    return home
