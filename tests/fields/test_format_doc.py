"""formats/fields.md is true: its blocks, run as written with h5py, lmdb or torch alone, read
every field of every sample as shardkit reads it."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import shardkit

from .conftest import ALL_FIELDS, make_samples

REPO = Path(__file__).resolve().parents[2]
LIBRARY = {"hdf5": "import h5py", "lmdb": "import lmdb", "pt": "import torch"}


def test_the_format_page_reads_every_field(tmp_path: Path, fmt: str) -> None:
    page = (REPO / "formats" / "fields.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    reader = next(block for block in blocks if LIBRARY[fmt] in block)
    fields = {**ALL_FIELDS, "caption": {"type": "text", "compression": "gzip"}}
    shardkit.write(make_samples(11), tmp_path / "ds", fields, format=fmt, samples_per_shard=4)
    scope = {"DST": str(tmp_path / "ds")}
    exec(compile(reader + blocks[-1], "formats/fields.md", "exec"), scope)
    ds = shardkit.open_dataset(tmp_path / "ds", decode={"image": None})
    assert len(scope["samples"]) == len(ds) == 11
    for index, got in enumerate(scope["samples"]):
        want = ds[index]
        assert got.keys() == want.keys()
        for name, value in want.items():
            if isinstance(value, np.ndarray):
                assert np.array_equal(got[name], value) and got[name].dtype == value.dtype, name
            else:
                assert got[name] == value, name
