"""Captions: a tree of images with caption sidecar files -> shardkit -> a few CLIP-style steps, on CPU.

    python examples/caption_tree.py --workdir /tmp/shardkit-captions
    python examples/caption_tree.py --workdir /tmp/shardkit-captions --icons /usr/share/icons/Adwaita/48x48

Steps: build SRC from files on this machine: each icon of an icon theme folder (one file per
name, the non-symbolic ones) becomes <category>/<name>.png, with <name>.txt its caption made from
its name and <name>.cls its category (without such a folder, the script draws shapes with their
captions instead). `shardkit convert SRC DST --sidecars --label-field cls` writes a dataset of
named fields (png, txt, cls), `verify --deep` checks every stored value, and a tiny two-tower
model (a CNN for images, a bag of hashed words for captions) trains a few steps with a
contrastive loss on batches of (image, caption) pairs read with fields=("png", "txt").
"""
from __future__ import annotations

import argparse
import os
import shutil
import zlib
from typing import Any, Iterator, List

import torch
import torch.nn as nn
import torch.nn.functional as F

import shardkit

DEFAULT_ICONS = "/usr/share/icons/Adwaita/48x48"
SIDE = 48
WORDS = 2048


def build_tree(src: str, icons: str, limit: int) -> int:
    """SRC from an icon theme's folders (or drawn shapes when there is none); how many samples."""
    if os.path.isdir(icons):
        count = 0
        for category in sorted(os.listdir(icons)):
            folder = os.path.join(icons, category)
            names = sorted(name for name in os.listdir(folder) if name.endswith(".png") and "symbolic" not in name)
            for name in names[:max(1, limit // 4)]:
                stem = name[:-4].replace(".", "-")
                os.makedirs(os.path.join(src, category), exist_ok=True)
                shutil.copyfile(os.path.join(folder, name), os.path.join(src, category, stem + ".png"))
                caption = f"an icon of {stem.replace('-', ' ')}, from the {category} icons"
                _write(src, category, stem, caption)
                count += 1
        if count:
            return count
    return _draw_tree(src, limit)


def _draw_tree(src: str, count: int) -> int:
    from PIL import Image, ImageDraw
    colours = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "black": (20, 20, 20)}
    for number in range(count):
        colour, shape = list(colours)[number % 4], ("square", "circle", "bar")[number % 3]
        image = Image.new("RGB", (SIDE, SIDE), "white")
        box = [8 + number % 9, 8 + number % 7, 36 + number % 9, 36 + (0 if shape != "bar" else -18) + number % 7]
        (ImageDraw.Draw(image).ellipse if shape == "circle" else ImageDraw.Draw(image).rectangle)(
            box, fill=colours[colour])
        os.makedirs(os.path.join(src, shape), exist_ok=True)
        image.save(os.path.join(src, shape, f"{number:04d}.png"))
        _write(src, shape, f"{number:04d}", f"a {colour} {shape} on white")
    return count


def _write(src: str, category: str, stem: str, caption: str) -> None:
    with open(os.path.join(src, category, stem + ".txt"), "w") as handle:
        handle.write(caption)
    with open(os.path.join(src, category, stem + ".cls"), "w") as handle:
        handle.write(category)


def tokens(captions: List[str]) -> tuple:
    """Hashed word ids of each caption, as EmbeddingBag's (ids, offsets)."""
    ids, offsets = [], []
    for caption in captions:
        offsets.append(len(ids))
        ids.extend(zlib.crc32(word.encode()) % WORDS for word in caption.lower().split())
    return torch.tensor(ids), torch.tensor(offsets)


def to_side(pair: tuple) -> tuple:
    """(image, caption) with the image resized to SIDE x SIDE, so that a batch stacks."""
    image, caption = pair
    return F.interpolate(image[None].float(), (SIDE, SIDE))[0].to(torch.uint8), caption


class TwoTowers(nn.Module):
    """An image CNN and a bag of words, each to a unit vector of 32."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                   nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 32))
        self.text = nn.EmbeddingBag(WORDS, 32)
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, images: torch.Tensor, captions: List[str]) -> torch.Tensor:
        a = F.normalize(self.image(images.float() / 255.0), dim=1)
        b = F.normalize(self.text(*tokens(captions)), dim=1)
        return self.scale.exp() * a @ b.T


def epochs(loader: torch.utils.data.DataLoader) -> Iterator[Any]:
    """The loader's batches, epoch after epoch (the sampler's next epoch each time)."""
    epoch = 0
    while True:
        loader.sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--icons", default=DEFAULT_ICONS, help="an icon theme's size folder, e.g. %(default)s")
    parser.add_argument("--images", type=int, default=400, help="about how many samples to build")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    src, dst = os.path.join(args.workdir, "captions"), os.path.join(args.workdir, "caption-shards")
    if not os.path.isdir(src):
        print(f"built {build_tree(src, args.icons, args.images)} samples in {src}")
    if not os.path.isfile(os.path.join(dst, "manifest.json")):
        report = shardkit.convert(src, dst, sidecars=True, label_field="cls", samples_per_shard=64)
        print(f"converted {report.num_samples} samples into {report.num_shards} shards, skipped {report.skipped}")
    check = shardkit.verify(dst, mode="deep", workers=1)
    print(f"verify: {'OK' if check.ok else check.problems[:3]} ({check.samples_checked} samples, deep)")
    ds = shardkit.open_dataset(dst, fields=("png", "txt"), decode={"png": "tensor"}, transform=to_side)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, collate_fn=shardkit.collate_fields,
                                         sampler=shardkit.ShardAwareSampler(ds, seed=0), drop_last=True)
    model = TwoTowers()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses: List[float] = []
    for _, (images, captions) in zip(range(args.steps), epochs(loader)):
        logits = model(images, captions)
        target = torch.arange(len(captions))
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    head, tail = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"{args.steps} steps: loss first {head:.3f} -> last {tail:.3f}")


if __name__ == "__main__":
    main()
