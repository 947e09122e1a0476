"""--resume reuses a shard only if its done record names exactly that shard, with checked types,
and the shard's bytes still have the recorded sha256."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import pytest

import shardkit
from tests.security.crafted import png_bytes

PRECIOUS = "/etc/hostname"


def interrupted(tmp_path: Path) -> Tuple[Path, Dict[str, Any]]:
    """A finished 3-shard conversion turned back into an unfinished one (its manifest removed, the
    journal it would have left restored), so --resume has done records to consider."""
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    for number in range(3):
        (src / f"{number}.png").write_bytes(png_bytes(colour=(number * 40, 0, 0)))
    dst = tmp_path / "dst"
    shardkit.convert(str(tmp_path / "src"), str(dst), format="pt", samples_per_shard=1, quiet=True)
    manifest = json.loads((dst / "manifest.json").read_text())
    return dst, manifest


def resume_with(tmp_path: Path, edit: Callable[[Dict[str, Any], Path], None]) -> Dict[str, Any]:
    """Kill-like state: journal with done records (edited), no manifest; then --resume."""
    from shardkit.writing.sink import ShardResult
    dst, manifest = interrupted(tmp_path)
    # Rebuild the journal a killed run leaves: plan.json and one done record per shard.
    journal_dir = dst / ".shardkit"
    journal_dir.mkdir()
    (journal_dir / "done").mkdir()
    plan = {"fingerprint": manifest["source"]["fingerprint"], "created": manifest["created"]}
    (journal_dir / "plan.json").write_text(json.dumps(plan))
    for entry in manifest["shards"]:
        record = ShardResult(shard=int(entry["path"][-8:-3]), path=entry["path"], num_samples=entry["num_samples"],
                             size=entry["size"], sha256=entry["sha256"]).to_dict()
        edit(record, dst)
        (journal_dir / "done" / f"{Path(entry['path']).stem}.json").write_text(json.dumps(record))
    (dst / "manifest.json").unlink()
    report = shardkit.convert(str(tmp_path / "src"), str(dst), format="pt", samples_per_shard=1, quiet=True,
                              resume=True)
    return {"report": report, "manifest": json.loads((dst / "manifest.json").read_text()), "dst": dst}


def point_outside(record: Dict[str, Any], dst: Path) -> None:
    if record["shard"] == 0:
        record["path"] = PRECIOUS
        record["size"] = Path(PRECIOUS).stat().st_size


def wrong_types(record: Dict[str, Any], dst: Path) -> None:
    if record["shard"] == 0:
        record["num_samples"] = "1"


def changed_bytes(record: Dict[str, Any], dst: Path) -> None:
    if record["shard"] == 0:
        path = dst / record["path"]
        data = bytearray(path.read_bytes())
        data[-30] ^= 0xFF                   # same size, other bytes
        path.write_bytes(bytes(data))


def test_honest_records_are_reused(tmp_path: Path) -> None:
    outcome = resume_with(tmp_path, lambda record, dst: None)
    assert outcome["report"].shards_reused == 3


@pytest.mark.parametrize("edit", [point_outside, wrong_types, changed_bytes])
def test_forged_or_stale_records_are_redone(tmp_path: Path, edit) -> None:
    if edit is point_outside and not Path(PRECIOUS).is_file():
        pytest.skip(f"{PRECIOUS} does not exist here")
    outcome = resume_with(tmp_path, edit)
    assert outcome["report"].shards_reused == 2
    assert [entry["path"] for entry in outcome["manifest"]["shards"]] == \
        [f"shards/shard-{number:05d}.pt" for number in range(3)]
    assert shardkit.verify(str(outcome["dst"]), mode="deep").ok
