"""What a table conversion holds in memory per row: a Parquet row group is read in batches, and the
HDF5 writer keeps only the payload, label and CRC32 of an array sample (no offsets)."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardkit.codecs.tabular import Column, TabularCodec
from shardkit.formats import get_format
from shardkit.records import EncodedRows
from shardkit.sources.tabular import readers
from shardkit.sources.tabular.scan import read_heads


def test_a_parquet_row_group_is_read_in_batches_of_batch_rows(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "one_group.parquet"
    values = np.arange(1000, dtype=np.float64)
    pq.write_table(pa.table({"x": values, "label": np.arange(1000) % 3}), path, row_group_size=1000)
    assert pq.ParquetFile(path).num_row_groups == 1
    monkeypatch.setattr(readers, "BATCH_ROWS", 128)
    (item,), _, _, delimiter = read_heads(str(path), None)
    blocks = list(readers.read_blocks(item, [0, 1], delimiter))
    assert max(len(block) for block in blocks) <= 128
    assert len(blocks) == 8
    read = np.concatenate([block.arrays[0].to_numpy() for block in blocks])
    assert np.array_equal(read, values)


def test_the_hdf5_writer_keeps_payload_label_and_crc_per_array_sample(tmp_path: Path) -> None:
    codec = TabularCodec([Column(f"x{i}", "float") for i in range(4)], "float32", None)
    writer = get_format("hdf5").open_writer(str(tmp_path / "s.h5"), codec.schema(), {}, "id")
    rows = 200_000
    block = np.ones((rows // 4, 4), dtype=np.float32)
    batch = EncodedRows(block, [-1] * len(block), [0] * len(block))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(4):
            writer.append_many(batch)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_row = held / rows
    # 16 payload bytes, 8 label, 4 CRC, plus the buffers' growth slack (1/8 at most): under 36
    assert 27 <= per_row < 36, f"{per_row:.1f} bytes held per 16-byte sample"
    writer.close()
