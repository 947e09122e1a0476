"""shardkit.Writer and shardkit.write: every field type round trips in every format, the schema
is inferred then enforced with errors naming the sample, keys, shard bounds and the bounded shuffle."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shardkit
from shardkit.errors import SampleError, UsageError

from .conftest import ALL_FIELDS, make_samples, png_bytes


def pixels(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def test_every_field_type_reads_back_as_written(tmp_path: Path, fmt: str) -> None:
    samples = make_samples(23)
    report = shardkit.write(samples, tmp_path / "ds", ALL_FIELDS, format=fmt, samples_per_shard=7, shuffle_buffer=5)
    assert (report.num_samples, report.num_shards) == (23, 4)
    with shardkit.open_dataset(tmp_path / "ds", decode={"image": "numpy"}) as ds:
        assert len(ds) == 23 and ds.classes == ["cat", "dog", "emu"]
        seen = set()
        for index in range(len(ds)):
            got, want = ds[index], samples[int(ds.key(index))]
            seen.add(int(ds.key(index)))
            assert np.array_equal(got["image"], pixels(want["image"]))
            assert got["caption"] == want["caption"] and got["meta"] == want["meta"]
            assert got["label"] == ("cat", "dog", "emu").index(want["label"])
            assert (got["count"], got["score"]) == (want["count"], want["score"])
            assert got["blob"] == want.get("blob")
            assert np.array_equal(got["embedding"], want["embedding"]) and got["embedding"].dtype == np.float32
            if "boxes" in want:
                assert got["boxes"].shape == want["boxes"].shape and np.array_equal(got["boxes"], want["boxes"])
            else:
                assert got["boxes"] is None
        assert seen == set(range(23))


def test_images_as_pil_and_arrays_are_stored_losslessly(tmp_path: Path) -> None:
    array = np.random.default_rng(3).integers(0, 256, size=(5, 6, 3), dtype=np.uint8)
    shardkit.write([{"a": Image.fromarray(array)}, {"a": array}], tmp_path / "ds", {"a": "image"}, order="source")
    ds = shardkit.open_dataset(tmp_path / "ds", decode="numpy")
    assert np.array_equal(ds[0]["a"], array) and np.array_equal(ds[1]["a"], array)


def test_the_schema_is_inferred_from_the_first_sample(tmp_path: Path) -> None:
    first = {"jpg": png_bytes(1), "raw": b"\x00\x01", "txt": "hi", "n": 3, "flag": True, "x": 0.5, "obj": {"a": 1},
             "lst": [1, 2], "arr": np.zeros((2, 3), np.int16), "scalar": np.float32(2.5)}
    shardkit.write([first], tmp_path / "ds")
    fields = {spec.name: spec for spec in shardkit.open_dataset(tmp_path / "ds").schema.fields}
    assert {name: spec.type for name, spec in fields.items()} == {
        "jpg": "image", "raw": "bytes", "txt": "text", "n": "int", "flag": "int", "x": "float", "obj": "json",
        "lst": "json", "arr": "array", "scalar": "float"}
    assert (fields["arr"].dtype, fields["arr"].shape) == ("int16", (2, 3))


@pytest.mark.parametrize("sample, words", [
    ({"caption": "x"}, ["'k3'", "'count'", "missing"]),
    ({"caption": "x", "count": 1, "extra": 2}, ["'k3'", "'extra'", "not in the schema"]),
    ({"caption": 5, "count": 1}, ["'k3'", "'caption'", "expected text", "int"]),
    ({"caption": "x", "count": 1.5}, ["'k3'", "'count'", "expected an integer", "float"]),
    ({"caption": "x", "count": 1, "vec": np.zeros(3, np.float64)}, ["'k3'", "'vec'", "dtype float64", "float32"]),
    ({"caption": "x", "count": 1, "vec": np.zeros((2, 2), np.float32)}, ["'k3'", "'vec'", "shape (2, 2)", "(any, 3)"]),
    ({"caption": "x", "count": 1, "cls": "owl"}, ["'k3'", "'cls'", "'owl'"]),
    ({"caption": "x", "count": 1, "cls": 7}, ["'k3'", "'cls'", "label 7"]),
    ({"caption": "x", "count": 1, "meta": {1, 2}}, ["'k3'", "'meta'", "not JSON"]),
    ({"caption": "x", "count": None}, ["'k3'", "'count'", "None"]),
])
def test_a_sample_that_breaks_the_schema_is_refused_by_its_key(tmp_path: Path, sample: dict, words: list) -> None:
    fields = {"caption": "text", "count": "int",
              "vec": {"type": "array", "dtype": "float32", "shape": [None, 3], "optional": True},
              "cls": {"type": "label", "classes": ["cat"], "optional": True},
              "meta": {"type": "json", "optional": True}}
    good = {"caption": "ok", "count": 1}
    with pytest.raises(SampleError) as caught:
        with shardkit.Writer(tmp_path / "ds", fields) as writer:
            for number, one in enumerate([good, good, good, sample]):
                writer.write(one, key=f"k{number}")
    message = str(caught.value)
    assert all(word in message for word in words), message
    assert "\n" not in message
    assert not (tmp_path / "ds" / "manifest.json").exists()      # nothing that looks complete


def test_keys_are_given_by_a_field_or_the_position(tmp_path: Path) -> None:
    samples = [{"id": f"img-{n}", "v": n} for n in range(6)]
    shardkit.write(samples, tmp_path / "a", key_field="id", order="source")
    shardkit.write(samples, tmp_path / "b", order="source")
    assert [shardkit.open_dataset(tmp_path / "a").key(i) for i in range(6)] == [f"img-{n}" for n in range(6)]
    assert [shardkit.open_dataset(tmp_path / "b").key(i) for i in range(6)] == [str(n) for n in range(6)]
    with pytest.raises(UsageError, match="key_field 'nope'"):
        shardkit.write(samples, tmp_path / "c", key_field="nope")


def test_shards_are_cut_by_count_and_by_size(tmp_path: Path, fmt: str) -> None:
    samples = [{"t": "x" * 3000, "n": n} for n in range(40)]
    shardkit.write(samples, tmp_path / "count", samples_per_shard=9)
    counts = shardkit.open_dataset(tmp_path / "count").manifest.shards.num_samples.tolist()
    assert counts == [9, 9, 9, 9, 4]
    limit = 100_000
    shardkit.write(samples, tmp_path / "size", format=fmt, shard_size=limit)
    manifest = shardkit.open_dataset(tmp_path / "size").manifest
    assert len(manifest.shards) > 1 and all(int(size) <= limit for size in manifest.shards.sizes)
    on_disk = {path: (tmp_path / "size" / path).stat().st_size for path in manifest.fields.paths()}
    assert int(manifest.shards.sizes.sum()) == sum(on_disk.values())


def test_a_shard_by_size_holds_what_the_formats_estimate_of_its_values_fits(tmp_path: Path, fmt: str) -> None:
    """shard_size: a shard takes samples while its files' fixed bytes and the format's sample_bytes
    of each value's stored size (payload and key) stay within the size. Mutation: the key's length
    left out of the estimate."""
    from shardkit.codecs.fields import storage_schema
    from shardkit.formats import get_format
    from shardkit.schema import FieldSpec

    samples = [{"t": "x" * (n * 37 % 300), "n": n} for n in range(400)]
    shape = get_format(fmt)
    schemas = [storage_schema(FieldSpec("t", "text")), storage_schema(FieldSpec("n", "int"))]
    limit = 2 * shape.fixed_bytes + 20_000
    expected, total = [0], 2 * shape.fixed_bytes
    for position, sample in enumerate(samples):
        stored = [len(sample["t"]), 8]
        size = sum(int(shape.sample_bytes(schema, np.array([one + len(str(position))]))[0])
                   for schema, one in zip(schemas, stored))
        if expected[-1] and total + size > limit:
            expected, total = expected + [0], 2 * shape.fixed_bytes
        expected[-1] += 1
        total += size
    shardkit.write(samples, tmp_path / "ds", {"t": "text", "n": "int"}, format=fmt, shard_size=limit, order="source")
    assert len(expected) > 3
    assert shardkit.open_dataset(tmp_path / "ds").manifest.shards.num_samples.tolist() == expected


def test_the_shuffle_is_bounded_by_the_buffer(tmp_path: Path) -> None:
    """A sample leaves the buffer only after it arrived and within `shuffle_buffer` inputs of the
    output position it takes; the order is a permutation that depends on the seed."""
    buffer = 8
    orders = []
    for seed in (0, 0, 1):
        dst = tmp_path / f"s{seed}-{len(orders)}"
        shardkit.write(({"n": n} for n in range(200)), dst, shuffle_buffer=buffer, seed=seed, samples_per_shard=50)
        ds = shardkit.open_dataset(dst)
        orders.append([ds[i]["n"] for i in range(len(ds))])
    assert sorted(orders[0]) == list(range(200)) and orders[0] == orders[1] != orders[2]
    assert orders[0] != list(range(200))
    assert all(value <= position + buffer for position, value in enumerate(orders[0]))
    shardkit.write(({"n": n} for n in range(50)), tmp_path / "src", order="source")
    ds = shardkit.open_dataset(tmp_path / "src")
    assert [ds[i]["n"] for i in range(50)] == list(range(50))


def test_the_same_input_and_seed_give_the_same_bytes(tmp_path: Path, fmt: str, source_date: None) -> None:
    samples = make_samples(12, seed=4)
    for name in ("a", "b"):
        shardkit.write(samples, tmp_path / name, ALL_FIELDS, format=fmt, samples_per_shard=5, seed=9)
    files = sorted(str(path.relative_to(tmp_path / "a")) for path in (tmp_path / "a").rglob("*") if path.is_file())
    assert any(name.startswith("shards/") for name in files)
    assert files == sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*") if p.is_file())
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_every_file_is_committed_and_listed(tmp_path: Path) -> None:
    shardkit.write(make_samples(9), tmp_path / "ds", ALL_FIELDS, samples_per_shard=4)
    dst = tmp_path / "ds"
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["manifest_version"] == 2 and not (dst / ".shardkit").exists()
    listed = {item["path"] for shard in manifest["shards"] for item in shard["files"].values()}
    assert listed == {f"shards/{name}" for name in os.listdir(dst / "shards")}
    assert "shards/shard-00000.boxes.shape.h5" in listed
    assert set(manifest["sample_tables"]) == {"image", "caption", "label", "count", "score", "blob", "meta",
                                              "embedding", "boxes", "boxes.shape"}


def test_options_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    for options in ({"order": "random"}, {"samples_per_shard": 0}, {"shuffle_buffer": 0}, {"part": (2, 2)},
                    {"format": "zip"}, {"seed": -1}):
        with pytest.raises(UsageError):
            shardkit.Writer(tmp_path / "ds", **options)
    with pytest.raises(UsageError, match="dtype"):
        shardkit.Writer(tmp_path / "ds", {"a": {"type": "array", "dtype": "complex64", "shape": [2]}})
    with pytest.raises(UsageError, match="no sample"):
        shardkit.write([], tmp_path / "empty")
    assert not (tmp_path / "empty" / "manifest.json").exists()


def test_an_image_field_checks_its_images_as_its_validate_says(tmp_path: Path) -> None:
    """validate "full" (the default) refuses bytes that do not decode; "none" stores what starts
    like an image, and verify --deep then names it."""
    broken = png_bytes(1)[:40]
    with pytest.raises(SampleError, match="'image'"):
        shardkit.write([{"image": broken}], tmp_path / "full", {"image": "image"})
    shardkit.write([{"image": broken}], tmp_path / "none", {"image": {"type": "image", "validate": "none"}})
    problems = shardkit.verify(str(tmp_path / "none"), mode="deep").problems
    assert len(problems) == 1 and "does not decode" in problems[0].message


def test_samples_handed_to_the_formats_in_runs_store_what_one_at_a_time_stores(tmp_path: Path, fmt: str,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard's samples reach the column writers in runs (field_shard.COLUMN_RUN); runs of 4 that
    cut shards of 7 anywhere give the same files, byte for byte, as runs of one sample. Mutations:
    a run's labels (presence) or CRC32s taken from another column; a run's keys dropped."""
    import shardkit.writing.field_shard as field_shard

    samples = make_samples(23)
    digests = []
    for run in (1, 4):
        monkeypatch.setattr(field_shard, "COLUMN_RUN", run)
        dst = tmp_path / f"run-{run}"
        shardkit.write(samples, dst, ALL_FIELDS, format=fmt, samples_per_shard=7, shuffle_buffer=5)
        digests.append([shard["files"] for shard in json.loads((dst / "manifest.json").read_text())["shards"]])
    assert digests[0] == digests[1]
    assert shardkit.verify(str(tmp_path / "run-4"), mode="deep").ok
    with shardkit.open_dataset(tmp_path / "run-4") as ds:
        assert sorted(ds.key(index) for index in range(len(ds))) == sorted(str(n) for n in range(23))
