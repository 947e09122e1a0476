"""row_crc32 gives zlib.crc32 of every row of a fixed-width block, for every width (the passes over
the tables, the one lookup of every byte it takes for few rows, and the per-row path past
TABLE_MAX_WIDTH) and across the passes it cuts the rows into."""
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
        if tables:                      # the passes for any number of rows (as for large blocks)
            patch.setattr(row_crc, "ONE_LOOKUP_ROWS_PER_BYTE", 0)
        crcs = row_crc32(rows)
    assert crcs.dtype == np.uint32 and crcs.shape == (count,)
    assert crcs.tolist() == _zlib_crcs(rows)


@pytest.mark.parametrize("width", [0, 1, 3, 7, 44, TABLE_MAX_WIDTH, TABLE_MAX_WIDTH + 1])
def test_rows_of_extreme_bytes_and_rows_cut_into_passes(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(row_crc, "ROWS_PER_PASS", 3)          # passes end inside the block, one is short
    monkeypatch.setattr(row_crc, "ONE_LOOKUP_ROWS_PER_BYTE", 0)    # the passes, though the block is small
    rows = np.array([[0] * width, [255] * width, [0x80] * width, [index % 256 for index in range(width)],
                     [1] * width, [0xFF, 0] * (width // 2) + [7] * (width % 2), [9] * width],
                    dtype=np.uint8).reshape(7, width)
    assert row_crc32(rows).tolist() == _zlib_crcs(rows)


def test_a_view_of_a_float_matrix_as_bytes_is_what_a_sample_stores() -> None:
    matrix = np.random.default_rng(3).standard_normal((50, 11)).astype(np.float32)
    assert row_crc32(matrix.view(np.uint8)).tolist() == [zlib.crc32(row.tobytes()) for row in matrix]


@pytest.mark.parametrize("extra", [-1, 7])
def test_blocks_on_either_side_of_the_threshold(extra: int) -> None:
    """The real threshold: one row fewer than ONE_LOOKUP_ROWS_PER_BYTE a byte (one lookup), and more (passes)."""
    rows = np.random.default_rng(5).integers(0, 256, (row_crc.ONE_LOOKUP_ROWS_PER_BYTE * 16 + extra, 16),
                                             dtype=np.uint8)
    assert row_crc32(rows).tolist() == _zlib_crcs(rows)


@pytest.mark.parametrize("width", [0, 1, 5, 16, TABLE_MAX_WIDTH])
def test_one_lookup_of_every_byte_value_at_every_position(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one lookup of every byte (forced for any number of rows): every byte value at every
    position, and two rows that differ in their last byte only."""
    monkeypatch.setattr(row_crc, "ONE_LOOKUP_ROWS_PER_BYTE", 1 << 20)
    values = np.arange(256, dtype=np.uint8)
    rows = np.stack([np.roll(values, shift)[:width] for shift in range(256)] + [np.zeros(width, np.uint8)] * 2)
    if width:
        rows[-1, -1] = 1
    assert row_crc32(np.ascontiguousarray(rows)).tolist() == _zlib_crcs(rows)
