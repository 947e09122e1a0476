"""verify checks every file of every field as it checks a shard (quick, full), and --deep also each
stored value against its field: images decode, text is UTF-8, JSON parses, arrays have their dtype
and a shape that fits, labels lie within their classes, required fields are present. info shows
the fields with their sizes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np
import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.codecs import fields as field_codec
from shardkit.writing import field_records as records_module

from .conftest import png_bytes

FIELDS = {"image": "image", "caption": "text", "label": {"type": "label", "classes": ["a", "b"]},
          "boxes": {"type": "array", "dtype": "float32", "shape": [None, 4]}, "meta": "json",
          "note": {"type": "text", "optional": True}}


def samples(count: int = 12) -> List[Dict[str, Any]]:
    return [{"image": png_bytes(n), "caption": f"c{n}", "label": n % 2, "boxes": np.ones((n % 3, 4), np.float32),
             "meta": {"n": n}, **({"note": "x"} if n % 2 else {})} for n in range(count)]


def write(dst: Path, fmt: str = "hdf5") -> Path:
    shardkit.write(samples(), dst, FIELDS, format=fmt, samples_per_shard=5, order="source")
    return dst


def kinds(report: Any) -> List[str]:
    return sorted({problem.kind for problem in report.problems})


def test_an_intact_dataset_verifies_in_every_mode(tmp_path: Path, fmt: str) -> None:
    dst = write(tmp_path / "ds", fmt)
    for mode in ("quick", "full", "deep"):
        report = shardkit.verify(str(dst), mode=mode)
        assert report.ok, report.problems
    assert report.samples_checked == 12 and report.shards_checked == 3


def test_damage_to_any_field_file_is_found_and_named(tmp_path: Path) -> None:
    dst = write(tmp_path / "ds")
    caption = dst / "shards" / "shard-00001.caption.h5"
    data = bytearray(caption.read_bytes())
    data[len(data) // 2] ^= 0x10
    caption.write_bytes(bytes(data))
    (dst / "shards" / "shard-00002.boxes.shape.h5").unlink()
    with open(dst / "shards" / "shard-00000.meta.h5", "ab") as handle:
        handle.write(b"\0")
    (dst / "shards" / "stray.h5").write_bytes(b"")
    report = shardkit.verify(str(dst), mode="full")
    by_kind = {problem.kind: problem.message for problem in report.problems}
    assert {"checksum", "missing", "size", "extra"} <= set(by_kind)
    assert "shard-00001.caption.h5" in by_kind["checksum"] and "shard-00002.boxes.shape.h5" in by_kind["missing"]
    assert "shard-00000.meta.h5" in by_kind["size"] and "stray.h5" in by_kind["extra"]
    assert kinds(shardkit.verify(str(dst), mode="quick")) == ["extra", "missing", "size"]


def test_a_damaged_field_sample_table_is_found(tmp_path: Path) -> None:
    dst = write(tmp_path / "ds")
    table = dst / "sample_table.label.bin"
    data = bytearray(table.read_bytes())
    data[0] ^= 1
    table.write_bytes(bytes(data))
    problems = shardkit.verify(str(dst), mode="full").problems
    assert problems and all("sample_table.label.bin" in problem.message for problem in problems)


def _bad(method: str, value: Any) -> Callable[[Any, Any], Any]:
    original = getattr(field_codec.FieldEncoder, method)

    def encode(self: Any, given: Any) -> Any:
        result = original(self, given)
        return value(result) if callable(value) else value
    return encode


@pytest.mark.parametrize("method, stored, words", [
    ("_image", b"not an image at all", ["image", "does not decode"]),
    ("_text", b"\xff\xfe", ["caption", "UTF-8"]),
    ("_json", b"{not json", ["meta", "JSON does not parse"]),
    ("_label", np.array([7], "<i8"), ["label", "label 7", "2 classes"]),
    ("_array", lambda pair: (pair[0] + b"\0\0", pair[1]), ["boxes", "not a whole number of float32"]),
    ("_array", lambda pair: (pair[0], np.array([1, 5], "<i8")), ["boxes", "does not fit"]),
])
def test_deep_checks_every_stored_value_against_its_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          method: str, stored: Any, words: List[str]) -> None:
    """The dataset is written with one encoder made to store a bad value (after its checks, as a
    damaged or crafted file would hold it): full verify passes (hashes match what was written),
    deep names the field, the file and the sample."""
    monkeypatch.setattr(field_codec.FieldEncoder, method, _bad(method, stored))
    dst = write(tmp_path / "ds")
    monkeypatch.undo()
    assert shardkit.verify(str(dst), mode="full").ok
    problems = shardkit.verify(str(dst), mode="deep").problems
    assert problems and all(problem.kind == "sample" and problem.index is not None for problem in problems)
    message = problems[0].message
    assert all(word in message for word in words), message
    assert ".h5: sample " in message


def test_deep_finds_a_required_field_stored_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = records_module.make_record
    caption = list(FIELDS).index("caption")     # the column of the caption (image has one column)

    def absent_caption(payloads: List[Any], key: Any, absent: Any, nbytes: int) -> Any:
        if payloads[caption] == b"c3":          # stored with the label of an absent value
            absent = (absent or ()) + (caption,)
        return original(payloads, key, absent, nbytes)
    monkeypatch.setattr(records_module, "make_record", absent_caption)
    dst = write(tmp_path / "ds")
    monkeypatch.undo()
    problems = shardkit.verify(str(dst), mode="deep").problems
    assert len(problems) == 1 and "'caption' is required but absent" in problems[0].message
    assert "sample 3" in problems[0].message


def test_info_shows_the_fields_and_their_sizes(tmp_path: Path) -> None:
    dst = write(tmp_path / "ds")
    result = CliRunner().invoke(main, ["info", str(dst), "--json"])
    data = json.loads(result.output)
    fields = {field["name"]: field for field in data["fields"]}
    on_disk = {path.name: path.stat().st_size for path in (dst / "shards").iterdir()}
    assert fields["boxes"]["bytes"] == sum(size for name, size in on_disk.items() if ".boxes." in name)
    assert fields["label"]["classes"] == ["a", "b"] and fields["note"]["optional"] is True
    text = CliRunner().invoke(main, ["info", str(dst)]).output
    assert "fields       6" in text and "boxes" in text and "optional" in text
