"""decode=None: each sample is the stored file's bytes, as a bytes object (cheap to send from workers)."""
from __future__ import annotations

import pickle
from pathlib import Path

import shardkit
from tests.conftest import files_in_dataset_order


def test_decode_none_returns_the_source_file_bytes(dataset_dir: Path, image_tree: Path) -> None:
    files = files_in_dataset_order(image_tree, dataset_dir)
    ds = shardkit.open_dataset(dataset_dir, decode=None, verify_checksums=True)
    assert len(ds) == len(files)
    for index in (0, 1, len(ds) // 2, len(ds) - 1):
        payload, label = ds[index]
        assert type(payload) is bytes
        assert payload == (image_tree / files[index]).read_bytes()
        assert ds.classes[label] == files[index].split("/")[0]
        assert pickle.loads(pickle.dumps(payload)) == payload
