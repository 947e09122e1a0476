"""KeyPacker.extend stores the same bytes as adding the keys one by one, across block edges, for lists
of keys and for runs of row keys (KeyRun)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.formats.keys import KEY_BLOCK, KeyPacker, run_bytes
from shardkit.records import KeyRun


def _packed(runs) -> tuple:
    packer = KeyPacker()
    for run in runs:
        if isinstance(run, str):
            packer.add(run)
        else:
            packer.extend(run, len(run) if run is not None else 5)
    data, blocks = packer.finish()
    return data, blocks.tolist(), packer.count


def test_extend_equals_add_one_by_one():
    keys = [f"t.csv:{row}" for row in range(3 * KEY_BLOCK + 17)]
    single = _packed(keys)
    runs = _packed([keys[:5], keys[5], keys[6:KEY_BLOCK + 3], keys[KEY_BLOCK + 3:]])
    assert runs == single and single[2] == len(keys)
    assert len(single[1]) == 5                      # four blocks: three full, one of 17


def test_extend_without_keys_stores_empty_keys():
    assert _packed([None]) == _packed([""] * 5)


def test_keys_holding_nul_or_none_or_odd_bytes_keep_their_bytes():
    keys = ["a\x00b", None, "c", "caf\udce9", "日本"]
    assert _packed([keys]) == _packed(keys[:1] + [""] + keys[2:])
    data, blocks, count = _packed([["x\x00", "y"]])
    assert count == 2 and _packed(["x\x00", "y"]) == (data, blocks, count)


ROW_PREFIXES = st.text(alphabet=st.sampled_from(["a", "/", ":", ".", "é", "日", "\udcff", "\x00", " "]), max_size=6)
FIRST_ROWS = st.sampled_from([0, 1, 9, 95, 999, 10 ** 6 - 3, 10 ** 19 - 40, 10 ** 19 + 5]) | st.integers(0, 10 ** 7)
RUNS = st.tuples(ROW_PREFIXES, FIRST_ROWS, st.integers(0, 2 * KEY_BLOCK + 5))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(RUNS, st.lists(st.text(max_size=5), max_size=30)), max_size=5))
def test_a_run_of_row_keys_packs_like_its_keys_added_one_by_one(runs) -> None:
    """KeyRun("t.csv:", first, n) is stored as the n strings "t.csv:<row>" would be, across block
    edges, digit counts (9 -> 10 -> ... -> 10**19) and runs mixed with lists of keys."""
    packer, one_by_one = KeyPacker(), KeyPacker()
    for run in runs:
        keys = KeyRun(*run) if isinstance(run, tuple) else run
        packer.extend(keys, len(keys))
        for key in keys:
            one_by_one.add(key)
    data, blocks = packer.finish()
    expected_data, expected_blocks = one_by_one.finish()
    assert data == expected_data and blocks.tolist() == expected_blocks.tolist()
    assert packer.count == one_by_one.count == sum(run[2] if isinstance(run, tuple) else len(run) for run in runs)


def test_a_run_of_keys_reads_as_the_strings_it_stands_for() -> None:
    run = KeyRun("d/t.csv:", 98, 5)
    strings = [f"d/t.csv:{row}" for row in range(98, 103)]
    assert list(run) == strings and len(run) == 5
    assert [run[index] for index in range(-5, 5)] == strings + strings
    assert list(run[1:4]) == strings[1:4] and isinstance(run[1:4], KeyRun) and list(run[4:2]) == []
    with pytest.raises(IndexError):
        run[5]
    with pytest.raises(ValueError):
        KeyRun("x:", -1, 3)


def test_run_bytes_gives_each_keys_length_and_bytes() -> None:
    lengths, data = run_bytes(KeyRun("é:", 8, 4))
    assert lengths.tolist() == [4, 4, 5, 5] and data == "é:8é:9é:10é:11".encode()
