"""The commit pipeline keeps each shard's durability order while shards commit in parallel:
the file is fsynced, renamed, and its folder fsynced before its done record is written; a failed
commit stops the run with the shard named and no done record for it."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import List, Tuple

import pytest

import shardkit
from shardkit import integrity
from shardkit.writing import journal
from shardkit.writing import sink as SINK
from shardkit.errors import ConversionError


def _spy(monkeypatch: pytest.MonkeyPatch) -> List[Tuple[str, str]]:
    """Record (event, path) of every fsync, rename and done record, still doing the real thing."""
    events: List[Tuple[str, str]] = []
    lock = threading.Lock()
    real_fsync, real_replace, real_done = integrity.fsync_path, os.replace, journal.Journal.write_done

    def fsync_path(path: "os.PathLike[str] | str") -> None:
        real_fsync(path)
        with lock:
            events.append(("fsync", os.fspath(path)))

    def replace(src: str, dst: str) -> None:
        real_replace(src, dst)
        with lock:
            events.append(("rename", os.fspath(src) + " -> " + os.fspath(dst)))

    def write_done(self: journal.Journal, stem: str, record: dict) -> None:
        with lock:
            events.append(("done", stem))
        real_done(self, stem, record)

    monkeypatch.setattr(integrity, "fsync_path", fsync_path)
    monkeypatch.setattr(SINK, "fsync_path", fsync_path)
    monkeypatch.setattr(integrity.os, "replace", replace)
    monkeypatch.setattr(journal.Journal, "write_done", write_done)
    return events


def test_each_shard_is_durable_before_its_done_record(image_tree: Path, fmt: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    events = _spy(monkeypatch)
    dst = tmp_path / "out"
    report = shardkit.convert(str(image_tree), str(dst), format=fmt, samples_per_shard=3, workers=1, quiet=True)
    assert report.num_shards > 8        # more shards than commit threads: commits overlap
    shards_dir = os.fspath(dst / "shards")
    for stem in (f"shard-{n:05d}" for n in range(report.num_shards)):
        done = events.index(("done", stem))
        rename = next(i for i, (kind, what) in enumerate(events)
                      if kind == "rename" and what.endswith(f"/{stem}{Path(what).suffix}") and "/shards/" in what)
        tmp = events[rename][1].split(" -> ")[0]
        synced = events.index(("fsync", tmp))
        folder = next(i for i in range(rename + 1, len(events)) if events[i] == ("fsync", shards_dir))
        assert synced < rename < folder < done, f"{stem}: {events[synced]}, {events[rename]}, {events[done]}"
    assert shardkit.verify(str(dst)).ok


def test_a_failed_commit_names_the_shard_and_records_nothing_for_it(image_tree: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real_fsync = integrity.fsync_path

    def failing(path: "os.PathLike[str] | str") -> None:
        if "shard-00004" in os.fspath(path):
            raise OSError(5, "Input/output error")
        real_fsync(path)

    monkeypatch.setattr(SINK, "fsync_path", failing)
    dst = tmp_path / "out"
    with pytest.raises(ConversionError, match=r"shard-00004\.h5: cannot write shard 4 .*Input/output error"):
        shardkit.convert(str(image_tree), str(dst), format="hdf5", samples_per_shard=3, workers=1, quiet=True)
    done = dst / ".shardkit" / "done"
    assert not (done / "shard-00004.json").exists() and not (dst / "shards" / "shard-00004.h5").exists()
    assert not (dst / "manifest.json").exists()
    assert [name for name in os.listdir(dst / "shards") if ".tmp" in name] == []


def test_a_stopped_run_drops_commits_before_their_rename(tmp_path: Path) -> None:
    """Ctrl-C while shards commit: a commit not yet at its rename removes its file and records
    nothing, so the stopped run counts no shard it had not finished (--resume redoes it)."""
    from shardkit.writing.plan import ShardTask
    from shardkit.writing.sink import ShardResult, WrittenShard

    (tmp_path / "shards").mkdir()
    journal.Journal(tmp_path).done_dir.mkdir(parents=True)
    tmp, final = tmp_path / "shards" / ".shard-00000.h5.tmp-1", tmp_path / "shards" / "shard-00000.h5"
    tmp.write_bytes(b"bytes")
    task = ShardTask(shard=0, start=0, stop=1)
    result = ShardResult(shard=0, path="shards/shard-00000.h5", num_samples=1, size=5, sha256="")
    assert WrittenShard(str(tmp_path), task, tmp, final, result).commit(cancelled=lambda: True) is None
    assert list((tmp_path / "shards").iterdir()) == [] and list(journal.Journal(tmp_path).done_dir.iterdir()) == []
    tmp.write_bytes(b"bytes")
    done = WrittenShard(str(tmp_path), task, tmp, final, result).commit()
    assert done is not None and done.sha256 == integrity.hash_file(final)
    assert (journal.Journal(tmp_path).done_dir / "shard-00000.json").is_file() and not tmp.exists()


def test_done_records_lost_or_torn_by_a_crash_only_make_resume_redo_their_shards(
        image_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Done records are not fsynced: a crash may leave one empty or cut short, or lose it. --resume
    then redoes just those shards, and the output is byte-identical to an uninterrupted run."""
    real_fsync = integrity.fsync_path

    def failing(path: "os.PathLike[str] | str") -> None:
        if "shard-00006" in os.fspath(path):
            raise OSError(5, "Input/output error")
        real_fsync(path)

    dst, fresh = tmp_path / "out", tmp_path / "fresh"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    with monkeypatch.context() as patched:
        patched.setattr(SINK, "fsync_path", failing)
        with pytest.raises(ConversionError):
            shardkit.convert(str(image_tree), str(dst), format="hdf5", samples_per_shard=3, workers=1, quiet=True)
    done = dst / ".shardkit" / "done"
    for number in range(3):
        assert (done / f"shard-{number:05d}.json").is_file()
    (done / "shard-00000.json").write_bytes(b"")                                   # created, never written
    record = (done / "shard-00001.json").read_bytes()
    (done / "shard-00001.json").write_bytes(record[:len(record) // 2])            # cut short
    (done / "shard-00002.json").unlink()                                            # lost
    intact = sum(1 for path in done.glob("shard-*.json") if path.stat().st_size > 0) - 1
    report = shardkit.convert(str(image_tree), str(dst), format="hdf5", samples_per_shard=3, workers=1, quiet=True,
                              resume=True)
    assert report.shards_reused == intact
    shardkit.convert(str(image_tree), str(fresh), format="hdf5", samples_per_shard=3, workers=1, quiet=True)
    for path in sorted((fresh / "shards").iterdir()):
        assert (dst / "shards" / path.name).read_bytes() == path.read_bytes(), path.name
    assert (dst / "manifest.json").read_bytes() == (fresh / "manifest.json").read_bytes()
