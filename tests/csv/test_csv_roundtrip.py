"""Values go in as CSV text and come back exactly: float32 numbers, NaN, codes, labels, text."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import shardkit


def test_numeric_values_round_trip_exactly_as_float32(make_csv, convert_csv, fmt):
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((300, 5)) * 10.0 ** rng.integers(-8, 8, (300, 5))).astype(np.float32)
    labels = rng.integers(0, 7, 300)
    rows = [[repr(float(v)) for v in row] + [int(label)] for row, label in zip(values, labels)]
    src = make_csv("data.csv", [f"x{i}" for i in range(5)] + ["label"], rows)
    ds = convert_csv(src, fmt, label_column="label", samples_per_shard=64)
    assert len(ds) == 300
    assert ds.schema.is_array and ds.schema.dtype == "float32" and tuple(ds.schema.shape) == (5,)
    got = torch.stack([ds[i][0] for i in range(len(ds))])
    assert got.dtype == torch.float32
    assert np.array_equal(got.numpy().view(np.uint32), values.view(np.uint32))
    assert [ds[i][1] for i in range(len(ds))] == labels.tolist()
    assert ds.classes == []
    assert shardkit.verify(ds.root, mode="deep").ok


def test_missing_values_become_nan(make_csv, convert_csv, fmt):
    missing = ["", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "  "]
    rows = [[spelling, "1.5", 0] for spelling in missing] + [["2.25", "", 1]]
    src = make_csv("m.csv", ["a", "b", "y"], rows)
    ds = convert_csv(src, fmt, label_column="y")
    a = [float(ds[i][0][0]) for i in range(len(ds))]
    b = [float(ds[i][0][1]) for i in range(len(ds))]
    assert all(math.isnan(value) for value in a[:-1]) and a[-1] == 2.25
    assert b[:-1] == [1.5] * len(missing) and math.isnan(b[-1])
    assert [column["type"] for column in ds.schema.columns] == ["float", "float"]


def test_string_columns_become_sorted_codes(make_csv, convert_csv, fmt):
    rows = [["red", "1", "a"], ["blue", "2", "b"], ["green", "3", "a"], ["", "4", "b"], ["blue", "5", "a"]]
    src = make_csv("c.csv", ["colour", "n", "y"], rows)
    ds = convert_csv(src, fmt, label_column="y")
    assert ds.columns == ["colour", "n"]
    assert ds.feature_names == ["colour", "n"]
    assert ds.vocabularies == {"colour": ["blue", "green", "red"]}
    assert [column["type"] for column in ds.schema.columns] == ["category", "int"]
    codes = [int(ds[i][0][0]) for i in range(len(ds))]
    assert codes == [2, 0, 1, -1, 0]
    assert ds.classes == ["a", "b"] and ds.class_to_idx == {"a": 0, "b": 1}
    assert [ds[i][1] for i in range(len(ds))] == [0, 1, 0, 1, 0]
    manifest = json.loads((ds.root and open(f"{ds.root}/manifest.json").read()))
    assert manifest["classes"] == ["a", "b"]
    assert manifest["schema"]["columns"][0] == {"name": "colour", "type": "category",
                                                "vocabulary": ["blue", "green", "red"]}


def test_integer_labels_are_kept_and_unlabeled_rows_return_features(make_csv, convert_csv, fmt):
    src = make_csv("i.csv", ["x", "target"], [[0.5, 12], [1.5, -3], [2.5, "7.0"]])
    ds = convert_csv(src, fmt, label_column="target")
    assert [ds[i][1] for i in range(3)] == [12, -3, 7]
    unlabeled = convert_csv(src, fmt, no_labels=True)
    sample = unlabeled[1]
    assert isinstance(sample, torch.Tensor) and sample.tolist() == [1.5, -3.0]
    assert unlabeled.columns == ["x", "target"]


def test_as_dict_gives_each_column_in_its_own_type(make_csv, convert_csv, fmt):
    big = 2 ** 40 + 1
    rows = [[big + i, 0.1 * i, ["u", "v"][i % 2], f"text {i}, with \"quotes\"\nand a newline", i % 3]
            for i in range(20)]
    src = make_csv("d.csv", ["id", "score", "kind", "note", "label"], rows)
    ds = convert_csv(src, fmt, label_column="label", text_columns=["note"],
                     open_kwargs={"as_dict": True})
    assert ds.schema.layout == "bytes" and ds.schema.codec["dtype"] == "float64"
    row = ds[5]
    assert row == {"id": big + 5, "score": np.float32(0.5), "kind": 1,
                   "note": "text 5, with \"quotes\"\nand a newline", "label": 2}
    assert isinstance(row["id"], np.int64) and isinstance(row["score"], np.float32)
    assert ds.columns == ["id", "score", "kind", "note"] and ds.feature_names == ["id", "score", "kind"]
    tensors = shardkit.open_dataset(ds.root)
    features, label = tensors[5]
    assert features.dtype == torch.float32 and features.shape == (3,) and label == 2
    numpy_rows = shardkit.open_dataset(ds.root, decode="numpy")
    assert numpy_rows[5][0].dtype == np.float32


def test_schema_file_overrides_inference_and_a_manifest_can_be_reused(make_csv, convert_csv, tmp_path, fmt):
    train = make_csv("train.csv", ["zip", "city", "y"], [["02134", "Boston", "cat"], ["10001", "NYC", "dog"]])
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": [{"name": "zip", "type": "category"}]}))
    ds = convert_csv(train, fmt, label_column="y", schema_file=str(schema))
    assert ds.vocabularies == {"zip": ["02134", "10001"], "city": ["Boston", "NYC"]}
    test = make_csv("test.csv", ["zip", "city", "y"], [["10001", "NYC", "dog"], ["99999", "LA", "cat"]])
    again = convert_csv(test, fmt, label_column="y", schema_file=f"{ds.root}/manifest.json")
    assert again.vocabularies == ds.vocabularies and again.classes == ["cat", "dog"]
    assert len(again) == 1 and again[0][0].tolist() == [1.0, 1.0] and again[0][1] == 1
    assert again.manifest.source["summary"]["skipped"] == 1


def test_dataloader_workers_read_csv_rows(make_csv, convert_csv):
    rows = [[i, i * 2, i % 2] for i in range(64)]
    ds = convert_csv(make_csv("w.csv", ["a", "b", "y"], rows), "hdf5", label_column="y", samples_per_shard=10)
    loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2, worker_init_fn=shardkit.worker_init_fn)
    features = torch.cat([batch[0] for batch in loader])
    assert features[:, 0].tolist() == [float(i) for i in range(64)]


def test_image_dataset_refuses_as_dict(dataset_dir):
    with pytest.raises(shardkit.UsageError, match="as_dict"):
        shardkit.open_dataset(dataset_dir, as_dict=True)
