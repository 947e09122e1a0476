"""A .pt shard is a zip archive: its index is checked before torch.load inflates anything."""
from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import CorruptShardError
from tests.faults.crafting import reseal
from tests.security.crafted import one_image_dataset


def deflate_entries(path: Path) -> str:
    """Rewrite the archive with every entry deflated, plus 16 MiB of zeros that deflate to KBs."""
    with zipfile.ZipFile(path) as archive:
        entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in entries:
            archive.writestr(name, data)
        archive.writestr(entries[0][0].split("/")[0] + "/padding", b"\0" * (16 << 20))
    return "is compressed"


def claim_huge_stored_entry(path: Path) -> str:
    """Patch the central directory so the first (stored) entry claims 2 GiB."""
    data = bytearray(path.read_bytes())
    record = data.index(b"PK\x01\x02")
    data[record + 20:record + 28] = struct.pack("<II", 0x7FFFFFFF, 0x7FFFFFFF)
    path.write_bytes(bytes(data))
    return "claims 2147483647 bytes"


@pytest.mark.parametrize("change", [deflate_entries, claim_huge_stored_entry])
def test_archive_index_is_checked_before_loading(tmp_path: Path, change) -> None:
    dst = one_image_dataset(tmp_path, "pt")
    shard = dst / "shards" / "shard-00000.pt"
    reason = change(shard)
    reseal(dst)
    assert shard.stat().st_size < (1 << 20)
    report = shardkit.verify(str(dst), mode="deep")
    assert [problem.kind for problem in report.problems] == ["structure"]
    assert reason in report.problems[0].message
    with pytest.raises(CorruptShardError, match=f"shard-00000.pt.*{reason}"):
        shardkit.open_dataset(dst)[0]
