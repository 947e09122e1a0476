"""KeyPacker.extend stores the same bytes as adding the keys one by one, across block edges."""
from __future__ import annotations

from shardkit.formats.keys import KEY_BLOCK, KeyPacker


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
