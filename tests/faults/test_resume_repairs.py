"""`--resume` on a finished dataset reuses nothing unchecked: each shard and the sample table are
compared with the manifest (size and sha256), and a shard deleted, bit-flipped or replaced by
another is written again, so the dataset ends byte for byte as the conversion wrote it and
`verify` accepts it; one that comes out different is refused with DST untouched. Mutations caught
here: resume reporting every shard of a finished dataset as reused without looking (the old
behaviour); checking only the size (a bit flip passes)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import ConversionError

from .helpers import SHARD, flip_bit, shard_paths, tree_bytes


def _copy_of(expected: dict, dst: Path) -> Path:
    for name, content in expected.items():
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (dst / name).write_bytes(content)
    return dst


def _resume(src: Path, dst: Path, fmt: str) -> "shardkit.ConvertReport":
    """The run that made the reference, resumed (the same plan: SRC, format, shard size)."""
    return shardkit.convert(src, dst, format=fmt, samples_per_shard=SHARD, workers=1, resume=True)


def test_resume_rewrites_deleted_flipped_and_replaced_shards(process_tree: Path, reference: tuple, fmt: str,
                                                             tmp_path: Path) -> None:
    expected, _ = reference
    dst = _copy_of(expected, tmp_path / "dst")
    shards = shard_paths(dst)
    total = len(shards)
    shards[0].unlink()                                      # deleted
    flip_bit(shards[1], os.path.getsize(shards[1]) // 2, 3)   # one bit flipped, size unchanged
    shutil.copyfile(shards[3], shards[2])                   # replaced by another shard of the dataset
    report = _resume(process_tree, dst, fmt)
    assert (report.shards_written, report.shards_reused, report.num_shards) == (3, total - 3, total)
    assert [line.split(" ")[0] for line in report.warnings] == [f"shards/{path.name}" for path in shards[:3]]
    assert "was missing" in report.warnings[0] and "sha256" in report.warnings[1]
    assert tree_bytes(dst) == expected
    assert shardkit.verify(dst).ok

    again = _resume(process_tree, dst, fmt)                 # nothing left to repair
    assert (again.shards_written, again.shards_reused, again.warnings) == (0, total, [])
    assert tree_bytes(dst) == expected


def test_resume_rewrites_a_damaged_sample_table(process_tree: Path, reference: tuple, fmt: str,
                                                tmp_path: Path) -> None:
    expected, _ = reference
    if "sample_table.bin" not in expected:
        pytest.skip(f"{fmt} shards keep no label and CRC32 tables, so its datasets have no sample table")
    dst = _copy_of(expected, tmp_path / "dst")
    flip_bit(dst / "sample_table.bin", 7, 0)
    report = _resume(process_tree, dst, fmt)
    assert report.shards_written == 0 and report.warnings == ["sample_table.bin did not match its recorded "
                                                              "sha256; written again"]
    assert tree_bytes(dst) == expected


@pytest.mark.parametrize("fmt", ["hdf5"])
def test_a_shard_that_comes_out_different_is_an_error(reference: tuple, fmt: str, tmp_path: Path) -> None:
    """SRC edited in place (same size, same mtime: the plan's fingerprint cannot tell): the shard
    written again differs from the manifest's record, and resume says so instead of finishing."""
    from .helpers import make_tiny_tree
    src = tmp_path / "src"
    make_tiny_tree(src, 8, seed=3)
    dst = tmp_path / "dst"
    shardkit.convert(src, dst, format=fmt, samples_per_shard=SHARD, workers=1, order="source")
    victim = sorted(path for path in src.rglob("*") if path.is_file())[0]
    stat = victim.stat()
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF                                       # inside the image's trailer: it still decodes
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    shard_paths(dst)[0].unlink()
    before = tree_bytes(dst)
    with pytest.raises(ConversionError, match=r"shard 0 \(shards/shard-00000\.h5\) cannot be rebuilt from SRC"
                                              r".*nothing was changed"):
        shardkit.convert(src, dst, format=fmt, samples_per_shard=SHARD, workers=1, order="source", resume=True)
    assert tree_bytes(dst) == before            # refused before anything was replaced
