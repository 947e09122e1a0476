"""The recipes of docs/fields.md ("Recipes"): a Hugging Face datasets.Dataset, a pandas DataFrame
and a torch Dataset written through shardkit.write, each read back as it was given."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import shardkit

from .conftest import png_bytes


def test_a_hugging_face_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"image": datasets.Image(decode=False), "text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["cat", "dog"])})
    hf = datasets.Dataset.from_dict({"image": [{"bytes": png_bytes(n), "path": None} for n in range(6)],
                                     "text": [f"t{n}" for n in range(6)], "label": [n % 2 for n in range(6)]},
                                    features=features)
    names = hf.features["label"].names
    fields = {"image": "image", "text": "text", "label": {"type": "label", "classes": names}}
    rows = ({"image": row["image"]["bytes"], "text": row["text"], "label": row["label"]} for row in hf)
    shardkit.write(rows, tmp_path / "ds", fields, order="source")
    ds = shardkit.open_dataset(tmp_path / "ds", decode={"image": None})
    assert [ds[i] for i in range(6)] == [{"image": png_bytes(n), "text": f"t{n}", "label": n % 2} for n in range(6)]
    assert ds.classes == ["cat", "dog"]


def test_a_pandas_data_frame(tmp_path: Path) -> None:
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"x": [0.5, 1.5, 2.5], "n": [1, 2, 3], "name": ["a", "b", "c"]})
    shardkit.write(frame.to_dict("records"), tmp_path / "ds", order="source")
    ds = shardkit.open_dataset(tmp_path / "ds")
    assert [spec.type for spec in ds.schema.fields] == ["float", "int", "text"]
    assert [ds[i] for i in range(3)] == frame.to_dict("records")


class Squares(torch.utils.data.Dataset):
    """A map-style torch Dataset of (tensor, label) pairs."""

    def __len__(self) -> int:
        return 5

    def __getitem__(self, index: int) -> tuple:
        return torch.full((2, 3), float(index)), index % 2


def test_a_torch_dataset(tmp_path: Path) -> None:
    source = Squares()
    samples = ({"x": x, "y": y} for x, y in (source[i] for i in range(len(source))))
    shardkit.write(samples, tmp_path / "ds", order="source", samples_per_shard=2)
    ds = shardkit.open_dataset(tmp_path / "ds", decode="tensor")
    assert [(torch.equal(ds[i]["x"], source[i][0]), ds[i]["y"]) for i in range(5)] == \
        [(True, i % 2) for i in range(5)]
    assert ds.schema.fields[0].dtype == "float32" and os.path.isdir(tmp_path / "ds" / "shards")
    assert np.asarray(ds[4]["x"]).shape == (2, 3)
