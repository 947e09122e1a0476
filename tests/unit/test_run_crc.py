"""run_crc32s gives zlib.crc32 of a run of fixed-width records from their per-record CRCs alone, for
every group at once: odd and even run lengths, widths from one byte to an image row's 150,528."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.codecs.row_crc import run_crc32s


def _records(groups: int, count: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (groups, count, width), dtype=np.uint8)


def _record_crcs(records: np.ndarray) -> np.ndarray:
    return np.array([[zlib.crc32(record.tobytes()) for record in group] for group in records],
                    dtype=np.uint32).reshape(records.shape[:2])


def _check(records: np.ndarray) -> None:
    crcs = run_crc32s(_record_crcs(records), records.shape[2])
    assert crcs.dtype == np.uint32 and crcs.shape == (records.shape[0],)
    assert crcs.tolist() == [zlib.crc32(group.tobytes()) for group in records]


@settings(max_examples=120, deadline=None)
@given(groups=st.integers(1, 6), count=st.integers(1, 40),
       width=st.one_of(st.integers(1, 40), st.sampled_from([16, 64, 255, 257, 1000])),
       seed=st.integers(0, 2 ** 32 - 1))
def test_every_group_gets_zlibs_crc32_of_its_run(groups: int, count: int, width: int, seed: int) -> None:
    _check(_records(groups, count, width, seed))


@pytest.mark.parametrize("groups, count, width", [
    (1, 1, 1), (3, 1, 16), (1, 2, 1), (2, 3, 16), (4, 5, 1), (3, 8, 16), (2, 12, 16), (5, 100, 16),
    (1, 1023, 3), (2, 1024, 1), (1, 1025, 16), (1, 1, 150528), (2, 3, 150528), (1, 4, 150528),
])
def test_run_shapes(groups: int, count: int, width: int) -> None:
    _check(_records(groups, count, width, seed=groups * 1_000_003 + count * 1009 + width))


@pytest.mark.parametrize("fill", [0x00, 0xFF])
def test_runs_of_extreme_bytes(fill: int) -> None:
    _check(np.full((3, 7, 33), fill, dtype=np.uint8))


@pytest.mark.parametrize("count, width", [(1, 16), (9, 16), (16, 1), (3, 150528)])
def test_one_changed_byte_changes_its_groups_crc_only(count: int, width: int) -> None:
    records = _records(4, count, width, seed=count + width)
    before = run_crc32s(_record_crcs(records), width)
    for record in {0, count // 2, count - 1}:
        changed = records.copy()
        changed[2, record, width // 3] ^= 0x5A
        after = run_crc32s(_record_crcs(changed), width)
        assert after[2] != before[2] and after[2] == zlib.crc32(changed[2].tobytes())
        assert np.array_equal(np.delete(after, 2), np.delete(before, 2))
