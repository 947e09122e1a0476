"""An open shard holds at most one file descriptor (the budget in docs/formats.md counts on it)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardkit.formats import format_names, get_format
from shardkit.schema import SampleSchema

from .shard_helpers import payload_bytes, sized_samples, write_shard


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
@pytest.mark.parametrize("name", format_names())
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_an_open_shard_holds_at_most_one_descriptor(tmp_path: Path, name: str, compression: str) -> None:
    schema = SampleSchema(kind="image", compression=compression)
    fmt = get_format(name)
    samples = sized_samples(40, 3000)
    readers = []
    before = _descriptors()
    for shard in range(3):
        path = tmp_path / f"s{shard}{fmt.extension}"
        write_shard(name, path, schema, samples)
        readers.append(fmt.open_reader(str(path), schema))
    assert _descriptors() - before <= 3
    assert all(payload_bytes(reader.read(7).payload) == samples[7].payload for reader in readers)
    for reader in readers:
        reader.close()
