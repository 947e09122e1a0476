"""CommitPipeline: a shard is renamed into place only while no Ctrl-C has been seen. The latch's
flag is read by each commit just before its rename, so a commit whose fsync ends after the Ctrl-C
was handled drops its file, without waiting for the pipeline's block to be left."""
from __future__ import annotations

from pathlib import Path

from shardkit.writing.commit import CommitPipeline
from shardkit.writing.plan import ShardTask
from shardkit.writing.sink import ShardResult, WrittenShard


def _written(dst: Path, number: int) -> WrittenShard:
    task = ShardTask(number, 0, 1)
    for folder in ("shards", ".shardkit/done"):
        (dst / folder).mkdir(parents=True, exist_ok=True)
    tmp = dst / "shards" / f".{task.name}.h5.tmp-0"
    tmp.write_bytes(b"shard bytes")
    result = ShardResult(shard=number, path=f"shards/{task.name}.h5", num_samples=1, size=11, sha256="")
    return WrittenShard(str(dst), task, tmp, dst / "shards" / f"{task.name}.h5", result)


def test_no_shard_is_renamed_once_a_ctrl_c_was_seen(tmp_path: Path) -> None:
    interrupted = [False]
    with CommitPipeline(interrupted=lambda: interrupted[0]) as pipeline:
        committed = pipeline.submit(_written(tmp_path, 0)) + pipeline.finish()
        interrupted[0] = True                              # the latch's flag: Ctrl-C handled
        dropped = pipeline.submit(_written(tmp_path, 1)) + pipeline.finish()
    assert [result.shard for result in committed] == [0] and dropped == []
    assert sorted(path.name for path in (tmp_path / "shards").iterdir()) == ["shard-00000.h5"]
    assert [path.name for path in (tmp_path / ".shardkit" / "done").iterdir()] == ["shard-00000.json"]
