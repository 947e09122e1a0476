"""Archives as SRC are untrusted input, read in place: members whose names lead out of the tree,
links, devices and FIFOs are skipped and listed (never followed, never written anywhere), a member
larger than it may be is not read, a zip member that inflates past its declared size is not
kept, a gzip bomb stops the conversion with one line, and nothing is ever unpacked to disk. The
archives are crafted here, byte by byte where tarfile and zipfile would refuse to write them."""
from __future__ import annotations

import gzip
import io
import json
import os
import struct
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import shardkit
from shardkit.samples import make_image_tree
from shardkit.sources.archive_safety import MAX_MEMBER_BYTES

TIME = 1_700_000_000        # whole (even) seconds: tar and zip keep them exactly


def _tree(root: Path, num_images: int = 8) -> List[str]:
    written = make_image_tree(str(root), num_images=num_images, classes=("cat", "dog"), seed=3, sizes=(8, 24))
    for path in root.rglob("*"):
        os.utime(path, (TIME, TIME))
    return written


def _tar_bytes(members: List[Tuple[tarfile.TarInfo, bytes]], mode: str = "w") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode, format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return out.getvalue()


def _info(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.linkname, info.mtime = size, kind, link, TIME
    return info


def _skipped(dst: Path) -> Dict[str, str]:
    lines = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    return {line["path"]: line["reason"] for line in lines if "path" in line}


def _shards(dst: Path) -> Dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((dst / "shards").iterdir())}


def _convert(src: Path, dst: Path, **options: object) -> shardkit.ConvertReport:
    return shardkit.convert(str(src), str(dst), samples_per_shard=3, workers=1, quiet=True, **options)


def test_unsafe_members_are_skipped_listed_and_never_written(tmp_path: Path) -> None:
    """Mutations: dropping the '..' check in archive_safety.safe_name, or taking links as regular
    members in archives._tar_kind_problem, makes this fail."""
    png = (tmp_path / "x.png")
    make_image_tree(str(tmp_path / "gen"), num_images=1, classes=("cat",), seed=1, sizes=(8, 8))
    png.write_bytes(next((tmp_path / "gen").rglob("*.*")).read_bytes())
    data = png.read_bytes()
    members = [(_info("cat/good.png", len(data)), data),
               (_info("cat/../../escape.png", len(data)), data),
               (_info("/etc/absolute.png", len(data)), data),
               (_info("cat/link.png", kind=tarfile.SYMTYPE, link="/etc/passwd"), b""),
               (_info("cat/hard.png", kind=tarfile.LNKTYPE, link="cat/good.png"), b""),
               (_info("cat/device.png", kind=tarfile.CHRTYPE), b""),
               (_info("cat/fifo.png", kind=tarfile.FIFOTYPE), b"")]
    archive = tmp_path / "src.tar"
    archive.write_bytes(_tar_bytes(members))
    report = _convert(archive, tmp_path / "dst")
    assert report.num_samples == 1
    skipped = _skipped(tmp_path / "dst")
    assert "leads out of the archive" in skipped["cat/../../escape.png"]
    assert "absolute name" in skipped["/etc/absolute.png"]
    assert "symbolic link in the archive" in skipped["cat/link.png"]
    assert "hard link in the archive" in skipped["cat/hard.png"]
    assert "device file" in skipped["cat/device.png"]
    assert "FIFO" in skipped["cat/fifo.png"]
    assert not (tmp_path / "escape.png").exists() and not (tmp_path.parent / "escape.png").exists()
    with shardkit.open_dataset(tmp_path / "dst", decode=None) as ds:
        assert [ds.key(0), bytes(ds[0][0])] == ["cat/good.png", data]


def test_zip_traversal_and_links_are_skipped(tmp_path: Path) -> None:
    data = b"not even an image, never read"
    archive = tmp_path / "src.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("../outside.png", data)
        link = zipfile.ZipInfo("cat/link.png")
        link.external_attr = (0o120777 << 16)
        out.writestr(link, "/etc/passwd")
        out.writestr("cat/readme.txt", b"other file")
    with pytest.raises(shardkit.EmptySourceError):
        _convert(archive, tmp_path / "dst")
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_a_zip_member_that_inflates_past_its_declared_size_is_not_kept(tmp_path: Path) -> None:
    """A member declares 100 bytes (central directory and local header agree) but inflates to
    4 MiB: the inflation stops after 101 bytes and the member is skipped. Mutation: inflating
    without max_length in archives.read_zip_member inflates all 4 MiB (and the reason changes)."""
    _tree(tmp_path / "tree", num_images=4)
    archive = tmp_path / "src.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for path in sorted((tmp_path / "tree").rglob("*.*")):
            out.write(path, path.relative_to(tmp_path / "tree").as_posix())
        out.writestr("cat/bomb.png", b"\0" * (4 << 20))
    raw = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as check:
        bomb = check.getinfo("cat/bomb.png")
    struct.pack_into("<I", raw, bomb.header_offset + 22, 100)        # local header: uncompressed size
    central = raw.index(b"cat/bomb.png", raw.index(b"PK\x01\x02")) - 46
    assert raw[central:central + 4] == b"PK\x01\x02"
    struct.pack_into("<I", raw, central + 24, 100)                    # central directory: uncompressed size
    archive.write_bytes(bytes(raw))
    report = _convert(archive, tmp_path / "dst")
    assert report.num_samples == 4
    assert "inflates to more bytes than the 100 it declares" in _skipped(tmp_path / "dst")["cat/bomb.png"]


def test_a_member_larger_than_allowed_is_not_read(tmp_path: Path) -> None:
    """A tar member declaring more than MAX_MEMBER_BYTES (its bytes a hole of a sparse file) is
    listed as skipped, never read. Mutation: too_large always returning "" fails here."""
    _tree(tmp_path / "tree", num_images=4)
    archive = tmp_path / "src.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "tree", arcname=".")
    size = MAX_MEMBER_BYTES + 1
    with tarfile.open(archive) as tar:
        tar.getmembers()
        end = tar.offset                            # where the end-of-archive blocks start
    with open(archive, "r+b") as handle:
        handle.truncate(end)
        handle.seek(end)
        handle.write(_info("dog/huge.png", size).tobuf(tarfile.GNU_FORMAT))
        handle.seek(end + 512 + size + (-size % 512) + 1024 - 1)
        handle.write(b"\0")
    report = _convert(archive, tmp_path / "dst")
    assert report.num_samples == 4
    assert f"declares {size} bytes" in _skipped(tmp_path / "dst")["dog/huge.png"]


def test_a_gzip_bomb_stops_the_conversion_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A .tar.gz of about 1 MB whose stream inflates to 1 GiB of zeros (one member declaring it,
    too large to read and so skipped over): the decompression stops at the inflation limit, the
    conversion fails with one line naming the archive, and DST holds no manifest. Mutation: an
    inflation_limit of 1 << 62 lets the whole gigabyte inflate (and the test fail)."""
    zeros = gzip.compress(b"\0" * (16 << 20), compresslevel=9)
    header = _info("cat/bomb.png", 1 << 30).tobuf(tarfile.GNU_FORMAT)
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(gzip.compress(header) + zeros * 64 + gzip.compress(b"\0" * 1024))
    assert archive.stat().st_size < 2 << 20
    from shardkit.cli import main
    with pytest.raises(SystemExit) as exited:
        main(["convert", str(archive), str(tmp_path / "dst"), "--quiet", "--workers", "1"])
    assert exited.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {archive}: inflates to more than")
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_a_tar_of_tars_reads_as_one_tree(tmp_path: Path) -> None:
    """ImageNet's layout: a tar holding one tar per class. Its members read as class folders and
    give the same shards as the unpacked tree; nothing is written outside DST meanwhile."""
    tree = tmp_path / "tree"
    _tree(tree)
    outer = tmp_path / "train.tar"
    with tarfile.open(outer, "w") as out:
        for name in ("cat", "dog"):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as tar:
                for path in sorted((tree / name).rglob("*.*")):
                    tar.add(path, arcname=path.relative_to(tree / name).as_posix())
            info = _info(f"{name}.tar", len(inner.getvalue()))
            out.addfile(info, io.BytesIO(inner.getvalue()))
    before = sorted(os.listdir(tmp_path))
    _convert(tree, tmp_path / "local", image_mode="png")
    _convert(outer, tmp_path / "tarred", image_mode="png")
    assert sorted(os.listdir(tmp_path)) == sorted(before + ["local", "tarred"])
    assert _shards(tmp_path / "tarred") == _shards(tmp_path / "local")
    assert shardkit.open_dataset(tmp_path / "tarred").classes == ["cat", "dog"]


@pytest.mark.parametrize("kind", ["tar", "tar.gz", "tar.bz2", "tar.xz", "zip"])
def test_an_archive_converts_to_the_same_shards_as_its_tree(tmp_path: Path, kind: str) -> None:
    """The golden check: the same files with the same times, the same seed, byte-identical shards."""
    tree = tmp_path / "tree"
    _tree(tree)
    archive = tmp_path / f"tree.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as out:
            for path in sorted(tree.rglob("*.*"), reverse=True):          # not in path order
                out.write(path, path.relative_to(tree).as_posix())
    else:
        with tarfile.open(archive, "w" if kind == "tar" else f"w:{kind.split('.')[1]}") as tar:
            tar.add(tree, arcname=".")
    _convert(tree, tmp_path / "local", seed=7)
    _convert(archive, tmp_path / "archived", seed=7)
    assert _shards(tmp_path / "archived") == _shards(tmp_path / "local")
    manifest = json.loads((tmp_path / "archived" / "manifest.json").read_text())
    assert manifest["source"]["path"] == str(archive)


def test_a_damaged_tar_header_is_an_error_not_a_shorter_listing(tmp_path: Path) -> None:
    """tarfile ends a listing quietly at a header whose checksum fails; shardkit says the archive
    is damaged. Mutation: dropping archives._check_end converts half the tree without a word."""
    _tree(tmp_path / "tree")
    archive = tmp_path / "src.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "tree", arcname=".")
    raw = bytearray(archive.read_bytes())
    with tarfile.open(archive) as tar:
        middle = [info for info in tar.getmembers() if info.isreg()][4].offset
    raw[middle + 3] ^= 0x20                                     # a letter of its name: the checksum fails
    archive.write_bytes(bytes(raw))
    with pytest.raises(shardkit.ShardkitError, match=f"damaged tar header at byte {middle}"):
        _convert(archive, tmp_path / "dst")
    assert not (tmp_path / "dst" / "manifest.json").exists()
