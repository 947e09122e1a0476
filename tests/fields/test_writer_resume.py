"""A Writer killed mid-run keeps its sealed shards; resume=True says how many inputs to skip and
finishes the dataset byte for byte as an uninterrupted run; parts merge in part order."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest

import shardkit
from shardkit.errors import UsageError
from shardkit.writing.shuffle import ShuffleBuffer

OPTIONS = {"samples_per_shard": 10, "shuffle_buffer": 7, "seed": 3}
KILLER = textwrap.dedent("""
    import os, signal, sys, time
    import shardkit
    dst, wait_for = sys.argv[1], sys.argv[2]
    def samples():
        for n in range(100):
            if n >= 80:     # shards sealed by now: die at once when one is recorded as committed
                for _ in range(100):
                    if os.path.exists(os.path.join(dst, ".shardkit", "done", wait_for)):
                        os.kill(os.getpid(), signal.SIGKILL)
                    time.sleep(0.01)    # the writer records a finished commit at its next write()
            yield {"text": "x" * n, "n": n}
    shardkit.write(samples(), dst, samples_per_shard=10, shuffle_buffer=7, seed=3)
""")


def samples(count: int = 100) -> List[Dict]:
    return [{"text": "x" * n, "n": n} for n in range(count)]   # fields not in name order


def files_of(root: Path) -> Dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def killed_run(dst: Path, wait_for: str = "shard-00003.fields.json") -> None:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
    done = subprocess.run([sys.executable, "-c", KILLER, str(dst), wait_for], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == -9, done.stderr
    assert not (dst / "manifest.json").exists() and (dst / ".shardkit").is_dir()


def test_a_killed_write_resumes_to_the_same_bytes(tmp_path: Path, source_date: None) -> None:
    shardkit.write(samples(), tmp_path / "whole", **OPTIONS)
    killed_run(tmp_path / "part")
    with shardkit.Writer(tmp_path / "part", resume=True, **OPTIONS) as writer:
        assert 0 < writer.resumed_samples < 80        # shards 0-3 at least were kept
        for sample in samples()[writer.resumed_samples:]:
            writer.write(sample)
    assert writer.report.shards_reused >= 4
    assert files_of(tmp_path / "part") == files_of(tmp_path / "whole")


def test_resume_keeps_only_intact_shards(tmp_path: Path, source_date: None) -> None:
    """Mutation: kept_record trusting a done record without hashing its files fails this test."""
    shardkit.write(samples(), tmp_path / "whole", **OPTIONS)
    killed_run(tmp_path / "part")
    damaged = tmp_path / "part" / "shards" / "shard-00001.text.h5"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    report = shardkit.write(samples(), tmp_path / "part", resume=True, **OPTIONS)
    assert report.shards_reused == 1
    assert files_of(tmp_path / "part") == files_of(tmp_path / "whole")


def test_resume_refuses_other_options_or_fields(tmp_path: Path) -> None:
    killed_run(tmp_path / "part", wait_for="shard-00000.fields.json")
    with pytest.raises(UsageError, match="options differ"):
        shardkit.Writer(tmp_path / "part", resume=True, **{**OPTIONS, "seed": 4})
    with pytest.raises(UsageError, match="fields differ"):
        shardkit.Writer(tmp_path / "part", {"n": "float", "text": "text"}, resume=True, **OPTIONS)
    with pytest.raises(shardkit.DestinationExistsError):
        shardkit.Writer(tmp_path / "part", **OPTIONS)


@pytest.mark.parametrize("count, capacity", [(0, 3), (5, 10), (100, 7), (300, 64), (40, 0)])
def test_the_shuffle_replays_from_any_kept_count(count: int, capacity: int) -> None:
    """After any number of samples left the buffer, before the input ended or while the rest was
    drained, the replayed buffer gives the rest of the very same order."""
    def run(buffer: ShuffleBuffer, start: int, out: List[int]) -> List[int]:
        for item in range(start, count):
            leaving = buffer.push(item)
            if leaving is not None:
                out.append(leaving)
        return out + list(buffer.drain())
    whole = run(ShuffleBuffer(capacity, 5), 0, [])
    assert sorted(whole) == list(range(count))
    before_end = max(0, count - capacity)
    for emitted in range(count + 1):
        for end in ([None] if emitted <= before_end else []) + ([count] if emitted >= before_end else []):
            buffer, skip = ShuffleBuffer.resumed(capacity, 5, emitted, end)
            assert skip <= emitted
            assert run(buffer, skip, whole[:emitted]) == whole, (emitted, end)


def test_parts_merge_in_part_order(tmp_path: Path) -> None:
    data = samples(47)
    shardkit.write(data[:20], tmp_path / "p0", part=(0, 2), samples_per_shard=6, order="source")
    shardkit.write(data[20:], tmp_path / "p1", part="1/2", samples_per_shard=6, order="source")
    report = shardkit.merge([str(tmp_path / "p1"), str(tmp_path / "p0")], str(tmp_path / "all"))
    assert (report.parts, report.num_samples) == (2, 47)
    ds = shardkit.open_dataset(tmp_path / "all")
    assert [ds[i]["n"] for i in range(47)] == list(range(47))
    assert ds.key(25) == "1/5" and ds.manifest.part is None
    assert shardkit.verify(str(tmp_path / "all"), mode="deep").ok
    shardkit.write(data[:5], tmp_path / "other", part=(1, 2), samples_per_shard=3)
    with pytest.raises(UsageError, match="different"):
        shardkit.merge([str(tmp_path / "p0"), str(tmp_path / "other")], str(tmp_path / "bad"))
