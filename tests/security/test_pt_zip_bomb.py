"""A .pt shard is a zip archive: its index is read as torch.load's miniz reads it, and must be laid
out as torch.save writes it, before torch.load inflates anything."""
from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path
from typing import Callable, Tuple

import pytest

import shardkit
from shardkit.errors import CorruptShardError
from tests.faults.crafting import reseal
from tests.faults.helpers import cli_env
from tests.security.crafted import one_image_dataset

EOCD = b"PK\x05\x06"
#: What the crafted data.pkl inflates to in torch.load (on an archive the check let through).
BOMB = 256 << 20


def _archive(path: Path) -> bytes:
    """The shard's archive without its comment (the locator), so that readers go through torch.load."""
    data = path.read_bytes()
    end = data.rfind(EOCD)
    return data[:end + 20] + b"\0\0"


def _directory(archive: bytes) -> Tuple[int, int, int]:
    """(directory offset, directory size, zip64 record offset) of an archive torch.save wrote."""
    record = archive.rfind(EOCD) - 20 - 56
    size, offset = struct.unpack_from("<QQ", archive, record + 40)
    return offset, size, record


def _deflated(content: bytes, zeros: int) -> Tuple[bytes, int]:
    """content followed by `zeros` zero bytes as one raw deflate stream (zip method 8), and its CRC32."""
    deflater, crc, pieces = zlib.compressobj(9, zlib.DEFLATED, -15), zlib.crc32(content), []
    pieces.append(deflater.compress(content))
    block = bytes(1 << 20)
    for _ in range(zeros >> 20):
        pieces.append(deflater.compress(block))
        crc = zlib.crc32(block, crc)
    return b"".join(pieces) + deflater.flush(), crc


def two_directories(path: Path) -> str:
    """A bomb only miniz sees: the archive torch.save wrote, after a prefix holding a second central
    directory at the offset the end record names. zipfile adjusts for the prefix and reads the
    first directory; miniz reads the second, whose data.pkl is the real pickle and BOMB zero bytes
    deflated (~250 KB), and every other entry the real one."""
    archive = _archive(path)
    offset, size, record = _directory(archive)
    with zipfile.ZipFile(path) as real:
        pickle_name = next(name for name in real.namelist() if name.endswith("/data.pkl"))
        pickle = real.read(pickle_name)
    stream, crc = _deflated(pickle, BOMB)
    bomb_at = offset + size + 56
    prefix_length = bomb_at + 30 + len(pickle_name) + len(stream)
    directory, at = bytearray(), offset
    while at < offset + size:
        (signature, made, need, flags, method, time_, date, entry_crc, packed, unpacked, name_length, extra_length,
         comment_length, disk, internal, external, local) = struct.unpack_from("<4sHHHHHHIIIHHHHHII", archive, at)
        name = archive[at + 46:at + 46 + name_length]
        rest = archive[at + 46:at + 46 + name_length + extra_length + comment_length]
        if name == pickle_name.encode():
            flags, method, entry_crc, packed, unpacked, local = 0, 8, crc, len(stream), len(pickle) + BOMB, bomb_at
        else:
            local += prefix_length
        directory += struct.pack("<4sHHHHHHIIIHHHHHII", signature, made, need, flags, method, time_, date, entry_crc,
                                 packed, unpacked, name_length, extra_length, comment_length, disk, internal,
                                 external, local) + rest
        at += 46 + name_length + extra_length + comment_length
    header = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(stream), len(pickle) + BOMB,
                         len(pickle_name), 0)
    prefix_bytes = bytes(offset) + bytes(directory) + archive[record:record + 56] + header + pickle_name.encode() \
        + stream
    assert len(prefix_bytes) == prefix_length
    path.write_bytes(prefix_bytes + archive)
    return "the zip64 end record is not where its locator says"


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
    data = bytearray(_archive(path))
    record = data.index(b"PK\x01\x02")
    data[record + 20:record + 28] = struct.pack("<II", 0x7FFFFFFF, 0x7FFFFFFF)
    path.write_bytes(bytes(data))
    return "runs into the central directory"


def sizes_differ(path: Path) -> str:
    """A stored entry whose uncompressed size is claimed larger than what it stores."""
    data = bytearray(_archive(path))
    record = data.index(b"PK\x01\x02")
    packed = struct.unpack_from("<I", data, record + 20)[0]
    struct.pack_into("<I", data, record + 24, packed + (64 << 20))
    path.write_bytes(bytes(data))
    return "bytes stored in"


def prepended_bytes(path: Path) -> str:
    """The archive after 4 KiB of other bytes: zipfile reads through them, miniz does not."""
    path.write_bytes(bytes(4096) + _archive(path))
    return "the zip64 end record is not where its locator says"


def second_end_record(path: Path) -> str:
    """A second end-of-central-directory signature in the archive's comment, too near the end for
    miniz to take it (zipfile takes the last signature it finds)."""
    archive = bytearray(_archive(path))
    comment = EOCD + bytes(6)
    struct.pack_into("<H", archive, len(archive) - 2, len(comment))
    path.write_bytes(bytes(archive) + comment)
    return "second end-of-central-directory record"


CASES = {change.__name__: change for change in
         (two_directories, deflate_entries, claim_huge_stored_entry, sizes_differ, prepended_bytes, second_end_record)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_archive_index_is_checked_before_loading(tmp_path: Path, case: str) -> None:
    """Mutations: check_zip_index reading the index through zipfile (two_directories); _directory
    without the zip64 record's place (two_directories, prepended_bytes); _entries accepting a method
    other than stored (deflate_entries) or unequal sizes (sizes_differ); _check_entries without the
    bound of the directory (claim_huge_stored_entry); check_zip_index without the end record count
    (second_end_record)."""
    change: Callable[[Path], str] = CASES[case]
    dst = one_image_dataset(tmp_path, "pt")
    shard = dst / "shards" / "shard-00000.pt"
    reason = change(shard)
    reseal(dst)
    assert shard.stat().st_size < (1 << 20)
    for mode in ("quick", "full", "deep"):
        report = shardkit.verify(str(dst), mode=mode)
        assert [problem.kind for problem in report.problems] == ["structure"], (mode, report.problems)
        assert re.search(reason, report.problems[0].message), (mode, report.problems)
    with pytest.raises(CorruptShardError, match=f"shard-00000.pt.*({reason})"):
        shardkit.open_dataset(dst)[0]


#: verify --deep and a read in a child, with the growth of its peak memory over both.
READ = """
import resource, sys
import shardkit, torch
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
before = peak()
report = shardkit.verify(sys.argv[1], mode="deep", workers=1)
try:
    shardkit.open_dataset(sys.argv[1], decode=None)[0]
    read = "no error"
except shardkit.ShardkitError as exc:
    read = str(exc)
print(json.dumps({"verify": [p.message for p in report.problems], "read": read, "grew": peak() - before}))
""".replace("import resource, sys", "import json, resource, sys")


def test_a_bomb_only_torch_would_see_costs_no_memory(tmp_path: Path) -> None:
    """The two-directory archive (1 MB) would inflate 256 MiB in torch.load: refused by the index
    check first, so neither verify --deep nor a read allocates it."""
    dst = one_image_dataset(tmp_path, "pt")
    two_directories(dst / "shards" / "shard-00000.pt")
    reseal(dst)
    with zipfile.ZipFile(dst / "shards" / "shard-00000.pt") as archive:   # zipfile sees only the real archive
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())
    result = subprocess.run([sys.executable, "-c", READ, str(dst)], env=cli_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    assert len(seen["verify"]) == 1 and "zip64 end record" in seen["verify"][0], seen
    assert "shard-00000.pt" in seen["read"] and "zip64 end record" in seen["read"], seen
    assert seen["grew"] < 64 << 20, seen
