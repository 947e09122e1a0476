"""Label kind inference looks at each distinct sampled label once, in the order they first appear."""
from __future__ import annotations

from pathlib import Path

import pytest

import shardkit
from shardkit.sources.tabular.types import infer_label_kind


def test_the_example_of_a_fractional_label_is_the_first_in_the_file(tmp_path: Path) -> None:
    rows = ["x,y"] + [f"{i},{label}" for i, label in enumerate(["1", "7.5", "2", "0.5", "7.5", "NA", "1"] * 50)]
    src = tmp_path / "r.csv"
    src.write_text("\n".join(rows) + "\n")
    with pytest.raises(shardkit.UsageError, match=r"non-integer numbers \(e\.g\. '7\.5'\)"):
        shardkit.convert(str(src), str(tmp_path / "out"), label_column="y", quiet=True, workers=1)


@pytest.mark.parametrize("values, kind", [(["3", "1", "3", "NA", ""], "int"), (["1", "cat", "1", "2"], "class"),
                                          (["NA", "", "NA"], "int"), (["1.0", "2", "1.0"], "int")])
def test_label_kinds_from_repeated_values(values, kind) -> None:
    assert infer_label_kind("y", values, "t.csv") == kind
