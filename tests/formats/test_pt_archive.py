""".pt shards are written without torch (formats/pt_archive.py), byte for byte as torch.save writes
them except the .data/serialization_id record that torch only logs; an archive too big for zip32
headers goes to torch.save itself, and both read the same."""
from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from array import array
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
import torch

from shardkit.formats import get_format, pt_archive
from shardkit.formats.pt_archive import Tensor
from shardkit.formats.pt_reader import located
from shardkit.records import Encoded
from shardkit.schema import SampleSchema

ID_RECORD = "archive/.data/serialization_id"


def _shard(count: int, width: int, seed: int) -> Dict[str, Any]:
    """A shard dict as PTWriter builds it: plain fields and uint8/int64 tensors, some empty."""
    rng = np.random.default_rng(seed)
    data = bytearray(rng.integers(0, 256, count * width, dtype=np.uint8).tobytes())
    blocks = np.arange(2 * (count // 7), dtype=np.int64).reshape(-1, 2)
    return {"shardkit_format": "pt", "format_version": 3, "layout": "array", "dtype": "float32", "shape": [3, 300],
            "compression": "none", "num_samples": count, "big": 1 << 40, "negative": -(1 << 20), "none": None,
            "data": Tensor(data, "uint8", (len(data),)),
            "offsets": Tensor(array("q", [i * width for i in range(count + 1)]), "int64", (count + 1,)),
            "raw_lengths": Tensor(array("q", [width] * count), "int64", (count,)),
            "labels": Tensor(array("q", rng.integers(-1, 1000, count).tolist()), "int64", (count,)),
            "dataset_id": "d" * 36, "keys": Tensor(bytearray(b"k" * 3 * count), "uint8", (3 * count,)),
            "key_blocks": Tensor(blocks, "int64", blocks.shape)}


def _torch_tensors(shard: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for name, value in shard.items():
        if isinstance(value, Tensor):
            dtype = torch.uint8 if value.dtype == "uint8" else torch.int64
            if memoryview(value.data).nbytes:
                value = torch.frombuffer(bytearray(memoryview(value.data).cast("B")), dtype=dtype).reshape(value.shape)
            else:
                value = torch.zeros(value.shape, dtype=dtype)
        out[name] = value
    return out


def _id_bytes(archive: bytes) -> List[int]:
    """Positions of the serialization id record's data and of its CRC32 (descriptor, central entry)."""
    info = zipfile.ZipFile(io.BytesIO(archive)).getinfo(ID_RECORD)
    start = info.header_offset + 30 + len(ID_RECORD) + int.from_bytes(archive[info.header_offset + 28:][:2], "little")
    central = archive.rindex(b"PK\x01\x02")
    return list(range(start, start + info.file_size)) + list(range(start + info.file_size + 4,
                                                                   start + info.file_size + 8)) \
        + list(range(central + 16, central + 20))


@pytest.mark.parametrize("count,width", [(0, 0), (1, 5), (300, 1000), (70_000, 3)])
def test_the_archive_is_torch_saves_but_for_the_serialization_id(count: int, width: int) -> None:
    shard = _shard(count, width, seed=count)
    ours = io.BytesIO()
    assert pt_archive.write(ours, shard)
    theirs = io.BytesIO()
    torch.save(_torch_tensors(shard), theirs)
    a, b = ours.getvalue(), theirs.getvalue()
    names = [info.filename for info in zipfile.ZipFile(io.BytesIO(b)).infolist()]
    if names != [info.filename for info in zipfile.ZipFile(io.BytesIO(a)).infolist()]:
        pytest.skip(f"torch {torch.__version__} writes other records: {names}")
    assert len(a) == len(b)
    differ = np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))
    assert set(differ.tolist()) <= set(_id_bytes(a)), differ[:10]
    loaded = torch.load(io.BytesIO(a), weights_only=True)
    for name, value in _torch_tensors(shard).items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(loaded[name], value) and loaded[name].stride() == value.stride(), name
        else:
            assert loaded[name] == value, name


def _write_shard(path: Path, rows: np.ndarray) -> bytes:
    schema = SampleSchema(kind="tabular", layout="array", dtype="float32", shape=(rows.shape[1],))
    writer = get_format("pt").open_writer(str(path), schema, {}, "id")
    writer.append_many([Encoded.make(row, key=f"row{index}") for index, row in enumerate(rows)])
    writer.close()
    with open(path, "rb") as handle:
        assert located(handle.fileno(), str(path)) is not None          # opens through its locator
    return path.read_bytes()


def test_an_archive_past_zip32_is_written_by_torch_save_with_the_same_bytes(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    rows = np.arange(3_000 * 16, dtype=np.float32).reshape(3_000, 16)
    ours = _write_shard(tmp_path / "ours.pt", rows)
    monkeypatch.setattr(pt_archive, "ZIP32_LIMIT", 0)
    theirs = _write_shard(tmp_path / "theirs.pt", rows)
    differ = np.flatnonzero(np.frombuffer(ours, np.uint8) != np.frombuffer(theirs, np.uint8))
    # the locator's trailer records the CRC32 of every byte outside the tensors, the id included
    trailer = list(range(len(ours) - 20, len(ours) - 12))
    assert len(ours) == len(theirs) and len(differ) and set(differ.tolist()) <= set(_id_bytes(ours) + trailer)


def test_converting_to_pt_does_not_import_torch(image_tree: Path, tmp_path: Path) -> None:
    code = ("import sys, shardkit; shardkit.convert(sys.argv[1], sys.argv[2], format='pt', quiet=True); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(image_tree), str(tmp_path / "dst")], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"
