"""What a DataLoader calls on a shardkit dataset, as docs/training.md says: `__getitems__` once per
batch, never `ds[i]` per sample (and the page says so)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, List, Sequence

import pytest
import torch

import shardkit

REPO = Path(__file__).resolve().parents[2]


class Counted(shardkit.HDF5Dataset):
    """The HDF5 dataset, counting the calls a loader makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: List[int] = []
        self.singles = 0

    def __getitem__(self, index: Any) -> Any:
        self.singles += 1
        return super().__getitem__(index)

    def __getitems__(self, indices: Sequence[Any]) -> List[Any]:
        self.batches.append(len(indices))
        return super().__getitems__(indices)


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_the_loader_reads_a_batch_per_call(dataset_dir: Path, fmt: str) -> None:
    ds = Counted(str(dataset_dir), decode=None)
    loader = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=0, collate_fn=list)
    seen = sum(len(batch) for batch in loader)
    assert seen == len(ds) == 120
    assert ds.batches == [32, 32, 32, 24] and ds.singles == 0
    page = " ".join((REPO / "docs" / "training.md").read_text().split())
    assert re.search(r"The loader calls `ds\.__getitems__\(indices\)` once per batch", page)
    assert "calls `ds[i]` once per sample" not in page
