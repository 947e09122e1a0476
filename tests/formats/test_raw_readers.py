"""formats/lmdb.md and formats/pt.md are enough to read every sample: their reader snippet runs in
a fresh process that imports only lmdb / torch (never shardkit) and must return exactly the
original inputs, for both payload layouts, both compressions, labeled and unlabeled."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardkit
from shardkit.formats import get_format
from shardkit.integrity import hash_file
from shardkit.manifest import Manifest, ShardEntry, load_manifest
from shardkit.records import Encoded
from shardkit.schema import SampleSchema

from ..conftest import image_files
from .test_docs_contract import REPO, python_blocks

RAW_FORMATS = ["lmdb", "pt"]

RUNNER = """
import hashlib, json, sys
import numpy as np
block, dsts = sys.stdin.read().split("\\0")
results = {}
for dst in json.loads(dsts):
    scope = {"DST": dst}
    exec(compile(block, "format page", "exec"), scope)
    results[dst] = [[hashlib.sha256(p.tobytes() if isinstance(p, np.ndarray) else bytes(p)).hexdigest(),
                     str(p.dtype) if isinstance(p, np.ndarray) else None,
                     list(p.shape) if isinstance(p, np.ndarray) else None, name]
                    for p, name in scope["samples"]]
assert "shardkit" not in sys.modules, "the page's reader must not need shardkit"
print(json.dumps(results))
"""


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _array_dataset(dst: Path, fmt_name: str, schema: SampleSchema, arrays: list, labels: list,
                   classes: list, per_shard: int) -> None:
    """A dataset of fixed-shape arrays written through the format's writer, with its manifest."""
    fmt = get_format(fmt_name)
    (dst / "shards").mkdir(parents=True)
    entries = []
    for number, first in enumerate(range(0, len(arrays), per_shard)):
        rel = f"shards/shard-{number:05d}{fmt.extension}"
        writer = fmt.open_writer(str(dst / rel), schema, fmt.writer_options(), "hand-made")
        for array, label in zip(arrays[first:first + per_shard], labels[first:first + per_shard]):
            writer.append(Encoded.make(array, label, key=f"row {len(entries)}"))
        writer.close()
        entries.append(ShardEntry(rel, len(arrays[first:first + per_shard]), first, (dst / rel).stat().st_size,
                                  hash_file(dst / rel)))
    Manifest(format_name=fmt.name, format_version=fmt.version, schema=schema, shards=entries, classes=classes,
             format_options=fmt.default_options(schema, 0), shardkit_version=shardkit.__version__,
             dataset_id="hand-made").save(dst)


@pytest.fixture(scope="module", params=RAW_FORMATS)
def raw_cases(request: pytest.FixtureRequest, image_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(format, {dst: expected [sha256, dtype, shape, class]}) over four kinds of dataset."""
    fmt = request.param
    root = tmp_path_factory.mktemp(f"raw-{fmt}")
    files = image_files(image_tree)
    images = [[_sha((image_tree / rel).read_bytes()), None, None, rel.split("/")[0]] for rel in files]
    cases = {}
    dst = root / "gzip"
    shardkit.convert(str(image_tree), str(dst), format=fmt, compression="gzip", compression_level=6,
                     samples_per_shard=50, order="source", quiet=True)
    cases[str(dst)] = images
    dst = root / "unlabeled"
    shardkit.convert(str(image_tree), str(dst), format=fmt, no_labels=True, samples_per_shard=70, order="source",
                     quiet=True)
    cases[str(dst)] = [[sha, None, None, None] for sha, *_ in images]
    rng = np.random.default_rng(5)
    for name, schema in (("rgb", SampleSchema(kind="image", layout="array", dtype="uint8", shape=(6, 5, 3))),
                         ("rows", SampleSchema(kind="tabular", layout="array", dtype="float32", shape=(4,),
                                               compression="gzip"))):
        arrays = [rng.integers(0, 255, schema.shape).astype(schema.dtype) for _ in range(23)]
        labels = [index % 3 for index in range(23)]
        _array_dataset(root / name, fmt, schema, arrays, labels, ["a", "b", "c"], per_shard=10)
        cases[str(root / name)] = [[_sha(a.tobytes()), schema.dtype, list(schema.shape), "abc"[label]]
                                   for a, label in zip(arrays, labels)]
    return fmt, cases


def test_page_reader_returns_the_original_samples(raw_cases: tuple, tmp_path: Path) -> None:
    fmt, cases = raw_cases
    block = python_blocks(REPO / "formats" / f"{fmt}.md")[0]
    done = subprocess.run([sys.executable, "-c", RUNNER], input=block + "\0" + json.dumps(sorted(cases)),
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    for dst, expected in cases.items():
        assert results[dst] == expected, dst


def test_shardkit_reads_the_hand_made_array_datasets(raw_cases: tuple) -> None:
    fmt, cases = raw_cases
    for dst, expected in cases.items():
        manifest = load_manifest(dst)
        if not manifest.schema.is_array:
            continue
        got = []
        for entry in manifest.shards:
            reader = get_format(fmt).open_reader(str(Path(dst) / entry.path), manifest.schema)
            for index in range(len(reader)):
                encoded = reader.read(index)
                assert encoded.crc_ok()
                payload = encoded.payload
                got.append([_sha(payload.tobytes()), str(payload.dtype), list(payload.shape),
                            manifest.classes[encoded.label]])
            reader.close()
        assert got == expected
        assert shardkit.verify(dst, mode="deep").ok
