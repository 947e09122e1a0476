"""Write every golden dataset that does not exist yet: one per format version and stored layout.

Golden datasets are committed and never regenerated: a later shardkit must read every one of
them. Run `python tests/golden/make_golden.py` once when a format (or format version) or a
layout is added. Each folder is `<format>-v<version>[-<layout>]`:

- (no suffix)   passthrough image bytes;
- raw-none, raw-gzip, raw-lzf   decoded uint8 arrays, stored plain or compressed (HDF5 chunk
  filters; LMDB and .pt zlib records — lzf is HDF5-only);
- tabular       CSV rows as float32 arrays, with class labels;
- fields        samples of named fields (manifest version 2) written by shardkit.write: every
                field type, optional values absent, a fixed- and a variable-shape array.

expected.json holds, per sample, the sha256 of its payload bytes and its class, computed from
the inputs alone (file bytes, Pillow's pixels, the CSV's numbers), never by shardkit.
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import shardkit  # noqa: E402
from shardkit.formats import format_names, get_format  # noqa: E402
from shardkit.samples import make_image_tree  # noqa: E402

Expected = List[Dict[str, str]]
#: Side of the raw golden images: drawn at exactly this size, so raw mode stores Pillow's pixels.
RAW_SIDE = (6, 8)


def golden_dir(name: str, version: int, layout: str = "") -> Path:
    """tests/golden/<format>-v<version>[-<layout>]."""
    return HERE / (f"{name}-v{version}" + (f"-{layout}" if layout else ""))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _passthrough_tree(tmp: Path) -> Tuple[Path, Expected]:
    src = tmp / "images"
    files = make_image_tree(str(src), num_images=8, classes=("cat", "dog"), seed=11, sizes=(6, 14))
    ordered = sorted(files, key=lambda rel: tuple(rel.split("/")))
    return src, [{"sha256": _sha((src / rel).read_bytes()), "class": rel.split("/")[0]} for rel in ordered]


def _raw_tree(tmp: Path) -> Tuple[Path, Expected]:
    from PIL import Image
    src = tmp / "raw"
    rng = np.random.default_rng(12)
    expected = []
    for number in range(8):
        name = ("cat", "dog")[number % 2]
        path = src / name / f"{number:02d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=(*RAW_SIDE, 3), dtype=np.uint8)
        pixels[:, :3] = 7                         # a run of equal bytes, so compression has work to do
        Image.fromarray(pixels).save(path)
    for name in ("cat", "dog"):
        for path in sorted((src / name).iterdir()):
            with Image.open(path) as image:
                expected.append({"sha256": _sha(np.asarray(image.convert("RGB")).tobytes()), "class": name})
    return src, expected


def _table(tmp: Path) -> Tuple[Path, Expected]:
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / "rows.csv"
    rng = np.random.default_rng(13)
    rows = [(float(rng.integers(-50, 50)), round(float(rng.random()), 3), ("low", "high")[i % 2]) for i in range(9)]
    src.write_text("a,b,kind\n" + "".join(f"{a},{b},{kind}\n" for a, b, kind in rows))
    return src, [{"sha256": _sha(np.array([a, b], dtype=np.float32).tobytes()), "class": kind} for a, b, kind in rows]


#: layout suffix -> (input builder, convert keywords, formats that store it)
LAYOUTS: Dict[str, Tuple[Callable[[Path], Tuple[Path, Expected]], Dict[str, Any], Tuple[str, ...]]] = {
    "": (_passthrough_tree, {"samples_per_shard": 5}, ("hdf5", "lmdb", "pt")),
    "raw-none": (_raw_tree, {"image_mode": "raw", "size": RAW_SIDE, "samples_per_shard": 5}, ("hdf5", "lmdb", "pt")),
    "raw-gzip": (_raw_tree, {"image_mode": "raw", "size": RAW_SIDE, "compression": "gzip", "samples_per_shard": 5},
                 ("hdf5", "lmdb", "pt")),
    "raw-lzf": (_raw_tree, {"image_mode": "raw", "size": RAW_SIDE, "compression": "lzf", "samples_per_shard": 5},
                ("hdf5",)),
    "tabular": (_table, {"label_column": "kind", "samples_per_shard": 4}, ("hdf5", "lmdb", "pt")),
}


def expected_dirs() -> List[Path]:
    """Every golden folder this shardkit's formats and layouts call for."""
    return [golden_dir(name, get_format(name).version, layout)
            for layout, (_, _, formats) in LAYOUTS.items() for name in format_names() if name in formats] + \
        [golden_dir(name, get_format(name).version, "fields") for name in format_names()]


FIELDS = {"image": "image", "caption": "text", "label": {"type": "label", "classes": ["cat", "dog"]},
          "count": "int", "score": "float", "meta": "json", "blob": {"type": "bytes", "optional": True},
          "vec": {"type": "array", "dtype": "int16", "shape": [3]},
          "boxes": {"type": "array", "dtype": "float32", "shape": [None, 4], "optional": True}}


def field_samples() -> Tuple[List[Dict[str, Any]], Expected]:
    """Seven samples of FIELDS, and what each must read back as (images by the sha256 of the bytes
    given, arrays as lists, bytes as hex), in the order written (order="source")."""
    from PIL import Image
    import io
    samples, expected = [], []
    for number in range(7):
        out = io.BytesIO()
        Image.new("RGB", (8, 6), (number * 30, 200 - number * 20, 90)).save(out, "PNG")
        sample = {"image": out.getvalue(), "caption": f"sample {number} «é»", "label": number % 2,
                  "count": number * 10 ** 10 - 3, "score": number / 8, "meta": {"n": number, "tags": ["x"] * number},
                  "vec": np.array([number, -number, 7], np.int16)}
        if number % 3:
            sample["blob"] = bytes(range(number))
        if number % 4:
            sample["boxes"] = np.full((number % 3, 4), number / 2, np.float32)
        samples.append(sample)
        expected.append({"image_sha256": _sha(sample["image"]), "caption": sample["caption"], "label": number % 2,
                         "count": sample["count"], "score": sample["score"], "meta": sample["meta"],
                         "blob": sample["blob"].hex() if "blob" in sample else None, "vec": [number, -number, 7],
                         "boxes": sample["boxes"].tolist() if "boxes" in sample else None, "key": str(number)})
    return samples, expected


#: Rows of the tabular golden datasets (from format version 2 on): features a, b and label kind.
ROWS = [(index * 0.5, (index * 7) % 11, "odd" if index % 2 else "even") for index in range(23)]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        files = make_image_tree(str(src), num_images=8, classes=("cat", "dog"), seed=11, sizes=(6, 14))
        ordered = sorted(files, key=lambda rel: tuple(rel.split("/")))
        expected = [{"sha256": hashlib.sha256((src / rel).read_bytes()).hexdigest(), "class": rel.split("/")[0],
                     "key": rel} for rel in ordered]
        table = Path(tmp) / "rows.csv"
        table.write_text("a,b,kind\n" + "".join(f"{a},{b},{kind}\n" for a, b, kind in ROWS))
        expected_rows = [{"values": [a, b], "class": kind, "key": f"rows.csv:{line}"}  # the header is line 1
                         for line, (a, b, kind) in enumerate(ROWS, start=2)]
        for name in format_names():
            fmt = get_format(name)
            dst = golden_dir(name, fmt.version)
            if not dst.exists():
                shardkit.convert(str(src), str(dst), format=name, samples_per_shard=5, order="source", quiet=True)
                (dst / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
                print(f"wrote {dst}")
            dst = dst.with_name(dst.name + "-rows")
            if fmt.version >= 2 and not dst.exists():
                shardkit.convert(str(table), str(dst), format=name, samples_per_shard=10, label_column="kind",
                                 order="source", quiet=True)
                (dst / "expected.json").write_text(json.dumps(expected_rows, indent=1) + "\n")
                print(f"wrote {dst}")
        for name in format_names():
            dst = golden_dir(name, get_format(name).version, "fields")
            if not dst.exists():
                samples, expected_fields = field_samples()
                shardkit.write(samples, str(dst), FIELDS, format=name, order="source")
                (dst / "expected.json").write_text(json.dumps(expected_fields, indent=1, ensure_ascii=False) + "\n")
                print(f"wrote {dst}")
        # after the keyed folders above: the passthrough layout's folder is the keyed one
        for layout, (build, options, formats) in LAYOUTS.items():
            for name in format_names():
                dst = golden_dir(name, get_format(name).version, layout)
                if name not in formats or dst.exists():
                    continue
                src, expected = build(Path(tmp) / f"{name}-{layout}")
                shardkit.convert(str(src), str(dst), format=name, order="source", quiet=True, **options)
                (dst / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
                print(f"wrote {dst}")


if __name__ == "__main__":
    main()
