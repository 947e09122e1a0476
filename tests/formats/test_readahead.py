"""The readahead reader option: recorded by size, overridable, and never changes what is read."""
from __future__ import annotations

from pathlib import Path

import pytest

import shardkit
from shardkit.formats import get_format
from shardkit.formats.base import READAHEAD_RAM_FRACTION, physical_memory, readahead_by_size
from shardkit.schema import SampleSchema


def test_policy_follows_ram() -> None:
    ram = physical_memory()
    assert ram > 0
    assert readahead_by_size(int(ram * READAHEAD_RAM_FRACTION)) == {"readahead": True}
    assert readahead_by_size(ram) == {"readahead": False}


def test_readahead_off_reads_the_same_samples(dataset_dir: Path, fmt: str) -> None:
    manifest = shardkit.open_dataset(dataset_dir).manifest
    offered = get_format(fmt).default_options(SampleSchema(kind="image"), 0)
    assert manifest.format_options.get("readahead") == offered.get("readahead")
    if "readahead" not in get_format(fmt).reader_options.names():      # e.g. pt: an option it does not take
        with pytest.raises(shardkit.UsageError, match="unknown option 'readahead'"):
            shardkit.open_dataset(dataset_dir, readahead=True)
        return
    with shardkit.open_dataset(dataset_dir, decode=None, readahead=True) as ds:
        on = [bytes(memoryview(p)) for p, _ in ds]
    with shardkit.open_dataset(dataset_dir, decode=None, readahead=False) as ds:
        off = [bytes(memoryview(p)) for p, _ in ds]
    assert on == off and len(on) == 120
