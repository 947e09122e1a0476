"""A generated image tree full of damaged and awkward inputs, with the facts a test checks.

Every bad file sits between good ones (names sort good, bad, good, ...), so a test can prove
that the good neighbours of a bad file survive. Which files are "bad" is decided by an oracle
that does not share code with shardkit: Pillow opening and fully decoding the bytes (no draft
mode), with the decompression-bomb warning treated as an error.
"""
from __future__ import annotations

import io
import os
import struct
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import numpy as np

#: Cut points for truncated files, as fractions of the length (plus a few absolute ones).
CUT_FRACTIONS = (0.0005, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.97)
CUT_FROM_END = (1, 2, 3)
CUT_ABSOLUTE = (1, 2, 4, 11)


@dataclass
class Corpus:
    """What was written: the tree root and what each relative path is expected to do."""

    root: Path
    #: every path shardkit should treat as an image item (image extension, regular or link), sorted
    image_paths: List[str] = field(default_factory=list)
    #: path -> a word the skip reason must contain (case-insensitive), for inputs known to be bad
    bad: Dict[str, str] = field(default_factory=dict)
    #: files the oracle decodes: they must all be stored, byte for byte, in order
    good: List[str] = field(default_factory=list)
    #: class folders that hold no image
    empty_classes: List[str] = field(default_factory=list)


def sort_key(rel: str) -> tuple:
    """shardkit's documented order: by path components."""
    return tuple(rel.split("/"))


def oracle_decodes(data: bytes) -> bool:
    """Whether Pillow fully decodes these bytes as an image (the bomb warning counts as failure)."""
    from PIL import Image
    if not data:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                image.load()
        return True
    except Exception:  # noqa: BLE001 - the oracle only says yes or no
        return False


def _pixels(rng: np.random.Generator, height: int = 12, width: int = 16) -> np.ndarray:
    gradient = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    noise = rng.normal(0, 30, size=(height, width, 3))
    return np.clip(gradient + noise, 0, 255).astype(np.uint8)


def encode(rng: np.random.Generator, fmt: str, mode: str = "RGB", **save: object) -> bytes:
    """A small real image file of the given Pillow format and mode."""
    from PIL import Image
    image = Image.fromarray(_pixels(rng))
    if mode == "I;16":
        image = Image.fromarray((np.asarray(image.convert("L"), dtype=np.uint16) * 257))
        image = image.convert("I;16") if image.mode != "I;16" else image
    elif mode != "RGB":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, fmt, **save)
    return buffer.getvalue()


def png_chunk(kind: bytes, body: bytes) -> bytes:
    """One PNG chunk with a correct CRC."""
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def bomb_header_png(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height pixels (far past Pillow's limit) and holds almost nothing."""
    header = png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b"")


def real_bomb_png() -> bytes:
    """A genuine 1-bit PNG of 10000 x 9500 pixels: more than Pillow's MAX_IMAGE_PIXELS, a few KB on disk."""
    from PIL import Image
    buffer = io.BytesIO()
    Image.new("1", (10000, 9500)).save(buffer, "PNG")
    return buffer.getvalue()


def build_corpus(root: Path, seed: int = 0, with_fifo: bool = True) -> Corpus:
    """Write the damaged tree under root (ImageFolder layout) and return its expected facts."""
    rng = np.random.default_rng(seed)
    corpus = Corpus(root=root)
    files: Dict[str, bytes] = {}
    counter = [0]

    def good(folder: str, data: bytes, ext: str) -> str:
        counter[0] += 1
        rel = f"{folder}/{counter[0]:04d}-good{ext}"
        files[rel] = data
        return rel

    def bad(folder: str, name: str, data: bytes, reason: str = "") -> str:
        counter[0] += 1
        rel = f"{folder}/{counter[0]:04d}-{name}"
        files[rel] = data
        if reason:
            corpus.bad[rel] = reason
        return rel

    # -- valid but unusual images: all must be stored ------------------------------------
    valid = {
        ".jpg": encode(rng, "JPEG"), ".png": encode(rng, "PNG"), ".webp": encode(rng, "WEBP"),
        ".bmp": encode(rng, "BMP"), ".gif": encode(rng, "GIF"), ".tif": encode(rng, "TIFF"),
    }
    unusual = {
        "cmyk.jpg": encode(rng, "JPEG", "CMYK"), "gray16.png": encode(rng, "PNG", "I;16"),
        "palette.png": encode(rng, "PNG", "P"), "gray-alpha.png": encode(rng, "PNG", "LA"),
        "bilevel.png": encode(rng, "PNG", "1"), "rgba.webp": encode(rng, "WEBP", "RGBA"),
        "progressive.jpg": encode(rng, "JPEG", progressive=True), "png-named.JPEG": encode(rng, "PNG"),
        "UPPER.PNG": encode(rng, "PNG"), "palette.gif": encode(rng, "GIF", "P"),
        "plain.bmp": valid[".bmp"], "plain.gif": valid[".gif"], "plain.tif": valid[".tif"],
    }
    for name, data in unusual.items():
        good("modes", valid[".jpg"], ".jpg")
        counter[0] += 1
        files[f"modes/{counter[0]:04d}-{name}"] = data

    # -- truncated JPEG / PNG / WebP at many cut points ----------------------------------
    for ext in (".jpg", ".png", ".webp"):
        data = valid[ext]
        cuts = sorted({max(1, int(len(data) * f)) for f in CUT_FRACTIONS}
                      | {len(data) - k for k in CUT_FROM_END} | set(CUT_ABSOLUTE))
        for cut in cuts:
            good("truncated", valid[".png"], ".png")
            rel = bad("truncated", f"cut{cut:05d}of{len(data)}{ext}", data[:cut])
            if cut <= len(data) // 2:
                corpus.bad[rel] = "decode|identify|truncated|broken"

    # -- bit flips in headers and bodies ------------------------------------------------
    for ext in (".jpg", ".png", ".webp"):
        data = valid[ext]
        positions = [int(p) for p in rng.choice(min(24, len(data)), size=4, replace=False)]
        positions += [int(p) for p in rng.integers(24, len(data), size=4)]
        for position in positions:
            flipped = bytearray(data)
            flipped[position] ^= 1 << int(rng.integers(0, 8))
            good("flipped", valid[".jpg"], ".jpg")
            bad("flipped", f"at{position:05d}{ext}", bytes(flipped))
    # the first two bytes of every format are magic: a flip there is always unidentifiable
    for ext in (".jpg", ".png", ".webp"):
        flipped = bytearray(valid[ext])
        flipped[0] ^= 0x10
        good("flipped", valid[".jpg"], ".jpg")
        bad("flipped", f"magic{ext}", bytes(flipped), "identify")

    # -- files that are not images, or too big ------------------------------------------
    good("odd", valid[".jpg"], ".jpg")
    bad("odd", "zero-bytes.jpg", b"", "empty")
    good("odd", valid[".jpg"], ".jpg")
    bad("odd", "text.jpg", b"this is not a picture\n" * 10, "identify")
    good("odd", valid[".jpg"], ".jpg")
    bad("odd", "html.png", b"<html><body>404 Not Found</body></html>\n", "identify")
    good("odd", valid[".jpg"], ".jpg")
    bad("odd", "bomb-header.png", bomb_header_png(60000, 60000), "bomb")
    good("odd", valid[".jpg"], ".jpg")
    bad("odd", "bomb-real.png", real_bomb_png(), "bomb")
    good("odd", valid[".jpg"], ".jpg")

    # -- awkward names (all valid images) -----------------------------------------------
    for name in ("with space.jpg", "ünïcødé 画像.png", "new\nline.jpg", "-rf.jpg", "--help.png",
                 "tab\tname.jpg", "quote'\"name.png", "back\\slash.jpg"):
        counter[0] += 1
        files[f"names/{counter[0]:04d}-{name}" if not name.startswith("-") else f"names/{name}"] = valid[".jpg"]
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    # -- links, loops, folders named like images, special files -------------------------
    links = root / "links"
    links.mkdir()
    (links / "0001-good.jpg").write_bytes(valid[".jpg"])
    os.symlink("does-not-exist.jpg", links / "0002-broken-link.jpg")
    corpus.bad["links/0002-broken-link.jpg"] = "link"
    (links / "0003-good.png").write_bytes(valid[".png"])
    os.symlink("0004-self-loop.jpg", links / "0004-self-loop.jpg")
    corpus.bad["links/0004-self-loop.jpg"] = "link"
    os.symlink("0001-good.jpg", links / "0005-good-link.jpg")
    os.symlink("..", links / "0006-dir-loop")
    (links / "0007-folder.jpg").mkdir()
    (links / "0007-folder.jpg" / "inner-good.jpg").write_bytes(valid[".jpg"])
    (links / "0008-good.jpg").write_bytes(valid[".jpg"])
    if with_fifo and hasattr(os, "mkfifo"):
        os.mkfifo(links / "0009-fifo.jpg")
        corpus.bad["links/0009-fifo.jpg"] = "regular file"
        (links / "0010-good.jpg").write_bytes(valid[".jpg"])
    (root / "links" / "notes.txt").write_text("not an image, just counted\n")
    # an invalid UTF-8 byte in a file name (legal on Linux)
    raw_name = os.path.join(os.fsencode(root / "names"), b"0999-latin1-\xe9.jpg")
    with open(raw_name, "wb") as handle:
        handle.write(valid[".jpg"])
    (root / "zz-empty-class").mkdir()
    corpus.empty_classes.append("zz-empty-class")

    corpus.image_paths = _image_items(root)
    for rel in corpus.image_paths:
        full = root / rel
        data = full.read_bytes() if full.is_file() else b""
        if oracle_decodes(data) and rel not in corpus.bad:
            corpus.good.append(rel)
        elif rel not in corpus.bad:
            corpus.bad[rel] = ""
    return corpus


def _image_items(root: Path) -> List[str]:
    """Relative paths with an image extension, as a directory walk that follows links once sees them."""
    from PIL import Image
    Image.init()
    extensions = {ext.lower() for ext in Image.registered_extensions()}
    found = []
    seen = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        key = (os.stat(dirpath).st_dev, os.stat(dirpath).st_ino)
        if key in seen:
            dirnames[:] = []
            continue
        seen.add(key)
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
            if os.path.splitext(name)[1].lower() in extensions:
                found.append(rel)
    return sorted(found, key=sort_key)
