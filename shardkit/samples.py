"""Built-in sample data: small image trees drawn by code, for the demo, tests and benchmarks."""
from __future__ import annotations

import os
from typing import List, Sequence, Tuple

import numpy as np

DEFAULT_CLASSES = ("circle", "square", "stripes", "triangle")


def draw_image(rng: np.random.Generator, width: int, height: int, kind: str) -> "np.ndarray":
    """An RGB uint8 picture of one class: a shape over a noisy gradient (compresses like a photo)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(0, 255, size=3).astype(np.float32)
    tilt = rng.uniform(-0.6, 0.6, size=(2, 3)).astype(np.float32)
    image = base + x[..., None] * tilt[0] * 255 / max(width, 1) + y[..., None] * tilt[1] * 255 / max(height, 1)
    image += rng.normal(0, 12, size=(height, width, 3)).astype(np.float32)
    cx, cy = rng.uniform(0.3, 0.7) * width, rng.uniform(0.3, 0.7) * height
    radius = rng.uniform(0.15, 0.35) * min(width, height)
    colour = rng.uniform(0, 255, size=3).astype(np.float32)
    if kind == "circle":
        mask = (x - cx) ** 2 + (y - cy) ** 2 < radius ** 2
    elif kind == "square":
        mask = (abs(x - cx) < radius) & (abs(y - cy) < radius)
    elif kind == "stripes":
        mask = ((x + y) // max(4.0, radius / 3)) % 2 == 0
    else:
        mask = (y > cy - radius) & (abs(x - cx) < (y - cy + radius) / 2)
    image[mask] = colour
    return np.clip(image, 0, 255).astype(np.uint8)


def make_image_tree(root: str, num_images: int = 300, classes: Sequence[str] = DEFAULT_CLASSES,
                    seed: int = 0, sizes: Tuple[int, int] = (24, 320), jpeg_fraction: float = 0.7,
                    quality: int = 90) -> List[str]:
    """Write an ImageFolder tree (root/<class>/<n>.jpg|png) of mixed JPEG/PNG at odd sizes.

    Some images are grayscale or have alpha, a few sit in nested folders. Deterministic for
    a seed. Returns the relative paths written, in order.
    """
    from PIL import Image
    rng = np.random.default_rng(seed)
    written: List[str] = []
    for number in range(num_images):
        kind = classes[number % len(classes)]
        width, height = (int(v) for v in rng.integers(sizes[0], sizes[1] + 1, size=2))
        pixels = draw_image(rng, width, height, kind if kind in DEFAULT_CLASSES else DEFAULT_CLASSES[number % 4])
        image = Image.fromarray(pixels)
        flavour = rng.uniform()
        if flavour < 0.1:
            image = image.convert("L")
        folder = os.path.join(root, kind, "nested") if number % 17 == 0 else os.path.join(root, kind)
        os.makedirs(folder, exist_ok=True)
        if rng.uniform() < jpeg_fraction:
            name = f"{number:06d}.jpg"
            image.save(os.path.join(folder, name), quality=quality)
        else:
            if flavour > 0.9:
                image = image.convert("RGBA")
            name = f"{number:06d}.png"
            image.save(os.path.join(folder, name))
        written.append(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/"))
    return written


def make_photo_tree(root: str, num_images: int, classes: int = 10, seed: int = 0,
                    width: int = 500, height: int = 375, quality: int = 90) -> int:
    """An ImageNet-like tree: JPEGs of about 500x375 (sizes vary ±20%). Returns total bytes."""
    rng = np.random.default_rng(seed)
    from PIL import Image
    total = 0
    for number in range(num_images):
        kind = DEFAULT_CLASSES[number % len(DEFAULT_CLASSES)]
        w = int(width * rng.uniform(0.8, 1.2))
        h = int(height * rng.uniform(0.8, 1.2))
        folder = os.path.join(root, f"class{number % classes:03d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{number:07d}.jpg")
        Image.fromarray(draw_image(rng, w, h, kind)).save(path, quality=quality)
        total += os.path.getsize(path)
    return total
