"""A Ctrl-C that lands inside a format library's own write is still an interruption (exit 130,
--resume finishes), not a failed write: torch.save (which writes .pt shards of 4 GiB or more)
turns the KeyboardInterrupt raised in its write callback into a RuntimeError ("unexpected pos"),
which the sink reports as a write error."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import ConversionInterrupted


def test_ctrl_c_inside_torch_save_is_an_interruption(image_tree: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from shardkit.formats import pt_archive
    monkeypatch.setattr(pt_archive, "ZIP32_LIMIT", 0)        # every shard "too big": torch.save writes it
    real_save = torch.save
    calls = []

    def save_hit_by_ctrl_c(obj: object, handle: object) -> None:
        calls.append(1)
        if len(calls) == 2:         # the second shard, once the first is committed in the background
            _wait_for_a_done_record(dst)
            try:
                os.kill(os.getpid(), signal.SIGINT)
                real_save(obj, handle)
            except KeyboardInterrupt:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1344 vs 1238")
        real_save(obj, handle)
    dst = tmp_path / "dst"
    monkeypatch.setattr(torch, "save", save_hit_by_ctrl_c)
    with pytest.raises(ConversionInterrupted) as caught:
        shardkit.convert(str(image_tree), str(dst), format="pt", samples_per_shard=30, workers=1, quiet=True)
    assert caught.value.exit_code == 130 and "--resume" in str(caught.value)
    assert not (dst / "manifest.json").exists()
    monkeypatch.setattr(torch, "save", real_save)
    report = shardkit.convert(str(image_tree), str(dst), format="pt", samples_per_shard=30, workers=1, quiet=True,
                              resume=True)
    assert report.shards_reused >= 1 and report.num_shards == report.shards_written + report.shards_reused
    assert shardkit.verify(str(dst), workers=1).ok


def _wait_for_a_done_record(dst: Path, seconds: float = 30.0) -> None:
    """Shards are committed (renamed, journaled) in background threads; a Ctrl-C before the first
    one's rename rightly drops it, so the test waits until it is journaled to have one to reuse."""
    deadline = time.monotonic() + seconds
    while not list((dst / ".shardkit" / "done").glob("*.json")):
        assert time.monotonic() < deadline, "the first shard was never committed"
        time.sleep(0.01)
