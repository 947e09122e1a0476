"""Crafted inputs of the security suite: a dataset whose shard is rewritten with chosen samples,
a fake Ghostscript that records every call, and small image files."""
from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Any, Dict, List, Optional

from shardkit.formats import get_format
from shardkit.records import Encoded
from tests.faults.crafting import reseal

#: A minimal EPS file Pillow's EPS plugin recognises (and would hand to Ghostscript to decode).
EPS = (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n"
       b"newpath 0 0 moveto 8 0 lineto 8 8 lineto closepath fill\nshowpage\n%%EOF\n")


def png_bytes(size: int = 8, colour: tuple = (200, 30, 30)) -> bytes:
    """A small RGB PNG."""
    from PIL import Image
    out = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(out, "PNG")
    return out.getvalue()


def png_header_only(width: int, height: int, idat: Optional[bytes] = None) -> bytes:
    """A PNG whose header claims width x height RGB pixels and whose data holds one row (or the
    given IDAT bytes): a decompression bomb's header."""
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    data = chunk(b"IDAT", zlib.compress(b"\0" * (1 + 3 * width)) if idat is None else idat)
    return b"\x89PNG\r\n\x1a\n" + header + data + chunk(b"IEND", b"")


def fake_ghostscript(folder: Path) -> Dict[str, str]:
    """A `gs` at the front of PATH that logs each call to folder/gs.log; the env to use it."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "gs.log"
    script = folder / "gs"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def gs_calls(folder: Path) -> List[str]:
    """The calls the fake `gs` logged."""
    log = folder / "gs.log"
    return log.read_text().splitlines() if log.exists() else []


def one_image_dataset(tmp: Path, fmt: str, payload: Optional[bytes] = None, **options: Any) -> Path:
    """A passthrough dataset of one labelled PNG (convert options as given); with payload, its
    shard is rewritten to hold that payload instead (CRC32 correct) and the manifest resealed,
    as an attacker would."""
    import shardkit
    src = tmp / "src"
    (src / "cls").mkdir(parents=True)
    (src / "cls" / "a.png").write_bytes(png_bytes())
    dst = tmp / "dst"
    shardkit.convert(str(src), str(dst), format=fmt, quiet=True, **options)
    if payload is not None:
        rewrite_shard(dst, [Encoded.make(payload, 0)])
    return dst


def rewrite_shard(dst: Path, samples: List[Encoded]) -> Path:
    """Replace the first shard of dst with one holding samples, written by the format's own
    writer; the manifest is resealed to match."""
    from shardkit.manifest import load_manifest
    manifest = load_manifest(dst)
    fmt = get_format(manifest.format_name)
    path = dst / manifest.shards[0].path
    path.unlink()
    writer = fmt.open_writer(str(path), manifest.schema, manifest.format_options, manifest.dataset_id or "")
    writer.append_many(samples)
    writer.close()
    reseal(dst)
    return path


def overlong_lmdb_record(tmp: Path, images: int = 1, claimed: int = 4 << 20) -> Path:
    """An LMDB dataset of noise PNGs (stored in overflow pages), one per shard, whose first
    shard's record node and record header both claim `claimed` bytes, far past the end of the
    file, resealed: LMDB hands out a value running past the file's end and the first read of it
    dies of SIGBUS."""
    import re
    import struct

    import numpy as np
    from PIL import Image

    import shardkit
    from shardkit.formats.lmdb_layout import RECORD, sample_key
    src = tmp / "src" / "cls"
    src.mkdir(parents=True)
    for number in range(images):
        out = io.BytesIO()
        noise = np.random.default_rng(number).integers(0, 255, (64, 64, 3), dtype=np.uint8)
        Image.fromarray(noise).save(out, "PNG")
        (src / f"{number}.png").write_bytes(out.getvalue())
    dst = tmp / "dst"
    shardkit.convert(str(tmp / "src"), str(dst), format="lmdb", samples_per_shard=1, quiet=True)
    path = dst / "shards" / "shard-00000.lmdb"
    data = bytearray(path.read_bytes())
    # leaf nodes of sample 0 (the live page and stale copies): size lo, hi, flags F_BIGDATA, key size 8
    nodes = [match.start() for match in re.finditer(re.escape(b"\x01\x00\x08\x00" + sample_key(0)), bytes(data))]
    assert nodes, "no overflow node for sample 0"
    for node in nodes:
        struct.pack_into("<HH", data, node - 4, claimed & 0xFFFF, claimed >> 16)
    page = struct.unpack_from("<Q", data, nodes[-1] + 12)[0]
    header = page * 4096 + 16                              # after the overflow page's header
    fields = list(RECORD.unpack_from(data, header))
    fields[5] = fields[6] = claimed - RECORD.size          # raw and stored lengths agree with the node
    RECORD.pack_into(data, header, *fields)
    path.write_bytes(bytes(data))
    reseal(dst)
    return dst
