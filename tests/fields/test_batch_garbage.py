"""A batch read makes no Python objects that outlive it beyond the samples it returns: in a
DataLoader worker forked from a training process, objects that survive the collector's young
passes set off its full passes, which walk (and copy, page by page) the whole inherited heap."""
from __future__ import annotations

import gc
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest

import shardkit


@pytest.mark.parametrize("format_name", ["hdf5", "lmdb", "pt"])
def test_batch_reads_of_bytes_and_text_leave_the_garbage_collector_idle(format_name: str, tmp_path: Path) -> None:
    samples = ({"image": bytes([n % 251]) * (200 + n % 50), "caption": f"a caption of sample {n}"}
               for n in range(4096))
    dst = shardkit.write(samples, tmp_path / "ds", {"image": "bytes", "caption": "text"}, format=format_name,
                         order="source").dst
    order = np.random.default_rng(0).permutation(4096).tolist()
    collections: List[Tuple[str, int]] = []

    def count(phase: str, info: dict) -> None:
        collections.append((phase, info["generation"]))
    with shardkit.open_dataset(dst, fields=("image", "caption")) as ds:
        first = ds.__getitems__(order[:256])
        assert first[0] == (bytes([order[0] % 251]) * (200 + order[0] % 50), f"a caption of sample {order[0]}")
        gc.collect()
        gc.callbacks.append(count)
        try:
            for start in range(0, 4096, 256):
                batch = ds.__getitems__(order[start:start + 256])
                assert len(batch) == 256
            del batch
        finally:
            gc.callbacks.remove(count)
    young = sum(1 for phase, generation in collections if phase == "start")
    assert young <= 4, f"{young} collections in 16 batches"     # a batch's per-record objects: about 2 a batch
