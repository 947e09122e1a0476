"""Empty payloads (an absent optional field's value) read back in every format, wherever they lie:
first, between others, last (past the last HDF5 chunk), and in a shard of nothing else."""
from __future__ import annotations

from pathlib import Path

import pytest

from shardkit.formats import get_format
from shardkit.records import Encoded
from shardkit.schema import SampleSchema


@pytest.mark.parametrize("payloads", [[b"", b"abc", b"", b"x" * 70_000, b"", b""], [b""] * 3])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_empty_payloads_read_back(tmp_path: Path, fmt: str, payloads: list, compression: str) -> None:
    """Mutation: HDF5Reader._payload without its empty-payload case fails this test (IndexError)."""
    layout = get_format(fmt)
    schema = SampleSchema(kind="bytes", labeled=False, compression=compression)
    path = tmp_path / f"shard{layout.extension}"
    writer = layout.open_writer(str(path), schema, layout.writer_options(), "0" * 32)
    for number, payload in enumerate(payloads):
        writer.append(Encoded.make(payload, -1, key=str(number)))
    writer.close()
    reader = layout.open_reader(str(path), schema)
    try:
        assert [bytes(reader.read(i).payload) for i in range(len(payloads))] == payloads
        backwards = list(range(len(payloads)))[::-1]
        records = reader.read_many(backwards)
        assert [bytes(one.payload) for one in records] == [payloads[i] for i in backwards]
        assert all(one.crc_ok() for one in records)
    finally:
        reader.close()
