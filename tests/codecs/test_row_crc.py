"""row_crc32 gives zlib.crc32 of every row of a fixed-width block, for every width (the table path
and the per-row path it takes past TABLE_MAX_WIDTH and for few rows) and across the passes it cuts
the rows into."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.codecs import row_crc
from shardkit.codecs.row_crc import TABLE_MAX_WIDTH, row_crc32


def _zlib_crcs(rows: np.ndarray) -> list:
    return [zlib.crc32(row.tobytes()) for row in rows]


@settings(max_examples=200, deadline=None)
@given(width=st.integers(0, TABLE_MAX_WIDTH + 40), count=st.integers(0, 40), seed=st.integers(0, 2 ** 32 - 1),
       tables=st.booleans())
def test_every_row_gets_zlibs_crc32(width: int, count: int, seed: int, tables: bool) -> None:
    rows = np.random.default_rng(seed).integers(0, 256, (count, width), dtype=np.uint8)
    with pytest.MonkeyPatch.context() as patch:
        if tables:                      # the table path for any number of rows (as for large blocks)
            patch.setattr(row_crc, "ZLIB_ROWS_PER_BYTE", 0)
        crcs = row_crc32(rows)
    assert crcs.dtype == np.uint32 and crcs.shape == (count,)
    assert crcs.tolist() == _zlib_crcs(rows)


@pytest.mark.parametrize("width", [0, 1, 3, 7, 44, TABLE_MAX_WIDTH, TABLE_MAX_WIDTH + 1])
def test_rows_of_extreme_bytes_and_rows_cut_into_passes(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_crc, "ROWS_PER_PASS", 3)          # passes end inside the block, one is short
    monkeypatch.setattr(row_crc, "ZLIB_ROWS_PER_BYTE", 0)      # the table path, though the block is small
    rows = np.array([[0] * width, [255] * width, [0x80] * width, [index % 256 for index in range(width)],
                     [1] * width, [0xFF, 0] * (width // 2) + [7] * (width % 2), [9] * width],
                    dtype=np.uint8).reshape(7, width)
    assert row_crc32(rows).tolist() == _zlib_crcs(rows)


def test_a_view_of_a_float_matrix_as_bytes_is_what_a_sample_stores() -> None:
    matrix = np.random.default_rng(3).standard_normal((50, 11)).astype(np.float32)
    assert row_crc32(matrix.view(np.uint8)).tolist() == [zlib.crc32(row.tobytes()) for row in matrix]


def test_a_block_of_many_rows_takes_the_tables() -> None:
    """The table path with its real threshold: a block of more rows than ZLIB_ROWS_PER_BYTE a byte."""
    rows = np.random.default_rng(5).integers(0, 256, (row_crc.ZLIB_ROWS_PER_BYTE * 16 + 7, 16), dtype=np.uint8)
    assert row_crc32(rows).tolist() == _zlib_crcs(rows)
