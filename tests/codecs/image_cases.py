"""Image files of every awkward kind, written with Pillow, and helpers for the image-mode tests."""
from __future__ import annotations

import io
from typing import Dict

import numpy as np
from PIL import Image

#: Files in odd_tree that every mode must refuse (skipped, with this word in the reason).
REFUSED = {"bad/bomb.png": "decompression bomb", "bad/not-an-image.jpg": "not an image"}


def smooth_rgb(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A noise-free picture (gradient + disc) whose JPEG/WebP loss is small and predictable."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(40, 200, size=3).astype(np.float32)
    image = base + x[..., None] * 60 / width - y[..., None] * 40 / height
    disc = (x - width * 0.55) ** 2 + (y - height * 0.45) ** 2 < (min(width, height) * 0.3) ** 2
    image[disc] = rng.uniform(0, 255, size=3)
    return np.clip(image, 0, 255).astype(np.uint8)


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def exif_with_orientation(value: object) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif.tobytes()


def ascii_orientation_exif(text: bytes) -> bytes:
    """EXIF whose Orientation tag is (wrongly) stored as ASCII text, as some tools write it."""
    import struct
    entry = struct.pack("<HHI4s", 0x0112, 2, len(text), text.ljust(4, b"\0"))
    return b"II*\x00" + struct.pack("<I", 8) + struct.pack("<H", 1) + entry + struct.pack("<I", 0)


def odd_files() -> Dict[str, bytes]:
    """Relative path -> file bytes: colour modes, bit depths, EXIF cases, animations, bad files."""
    rgb = Image.fromarray(smooth_rgb(48, 32, seed=1))
    files: Dict[str, bytes] = {}
    files["ok/rgb.jpg"] = encode(rgb, "JPEG", quality=95)
    files["ok/rgb.png"] = encode(rgb, "PNG")
    files["ok/rgb.webp"] = encode(rgb, "WEBP", lossless=True)
    files["ok/cmyk.jpg"] = encode(Image.new("CMYK", (40, 30), (0, 255, 255, 0)), "JPEG", quality=95)
    palette = Image.new("P", (40, 30), 0)
    palette.putpalette([0, 0, 255] + [0, 255, 0] + [0] * 762)
    palette.paste(1, (0, 0, 20, 30))
    files["ok/palette-transparent.png"] = encode(palette, "PNG", transparency=0)
    rgba = np.zeros((30, 40, 4), dtype=np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = 128
    rgba[:, 20:, 3] = 255
    files["ok/rgba-half.png"] = encode(Image.fromarray(rgba, "RGBA"), "PNG")
    files["ok/la.png"] = encode(Image.fromarray(rgba[..., [0, 3]], "LA"), "PNG")
    wide = (np.arange(40 * 30, dtype=np.uint32).reshape(30, 40) * 54).astype(np.uint16)
    wide[0, 0], wide[0, 1] = 65535, 0x8080
    files["ok/gray16.png"] = encode(Image.fromarray(wide), "PNG")
    files["ok/gray16.tif"] = encode(Image.fromarray(wide), "TIFF")
    files["ok/gray32.ppm"] = encode(Image.fromarray(wide).convert("I"), "PPM")
    files["ok/gray.jpg"] = encode(rgb.convert("L"), "JPEG", quality=95)
    files["ok/bilevel.png"] = encode(rgb.convert("1"), "PNG")
    frames = [Image.new("RGB", (40, 30), colour) for colour in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    files["ok/animated.gif"] = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)
    files["ok/animated.webp"] = encode(frames[0], "WEBP", save_all=True, append_images=frames[1:],
                                       lossless=True)
    tall = Image.fromarray(smooth_rgb(40, 24, seed=2))
    files["ok/exif-rotate-6.jpg"] = encode(tall, "JPEG", quality=95, exif=exif_with_orientation(6))
    files["ok/exif-orientation-9.jpg"] = encode(tall, "JPEG", quality=95, exif=exif_with_orientation(9))
    files["ok/exif-garbage.jpg"] = encode(tall, "JPEG", quality=95, exif=b"Exif\x00\x00II*\x00\xff\xff\xff\x7f")
    files["ok/icc.jpg"] = encode(rgb, "JPEG", quality=95, icc_profile=b"\0" * 128, comment=b"hello")
    files["bad/bomb.png"] = encode(Image.new("1", (10000, 9000)), "PNG")
    files["bad/not-an-image.jpg"] = b"this is text, not a JPEG\n"
    return files


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 arrays in dB (inf when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)
