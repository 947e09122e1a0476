"""Detection: a table of image paths with JSON boxes -> shardkit -> a few training steps, on CPU.

    python examples/detection_table.py --workdir /tmp/shardkit-detection

Steps: draw --images scenes of 1 to 3 objects (icons of an icon theme folder pasted on a canvas
when one is found, else coloured squares), each saved as images/NNNN.png, and write labels.csv:
`path,boxes,count` with the boxes as JSON ([[x0, y0, x1, y1], ...], in pixels).
`shardkit convert labels.csv DST --image-column path` writes a dataset of named fields (image,
boxes as JSON, count), `verify --deep` checks it, and a small CNN learns for a few steps to count
the objects and place the first box, reading batches whose boxes are padded to the batch's
largest count (shardkit.collate_fields with pad=-1).
"""
from __future__ import annotations

import argparse
import functools
import json
import os
from typing import Any, Dict, List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import shardkit

SIDE = 64
ICONS = "/usr/share/icons/Adwaita/16x16/legacy"


def objects(icons: str) -> List[Any]:
    """What to paste: 16x16 RGBA icons from the folder, or coloured squares when it has none."""
    from PIL import Image
    found = sorted(name for name in os.listdir(icons) if name.endswith(".png"))[:40] if os.path.isdir(icons) else []
    if found:
        return [Image.open(os.path.join(icons, name)).convert("RGBA").resize((16, 16)) for name in found]
    return [Image.new("RGBA", (16, 16), (40 * k % 256, 200 - 30 * k, 90, 255)) for k in range(6)]


def build_table(root: str, count: int, icons: str) -> None:
    """root/images/NNNN.png and root/labels.csv (path, boxes as JSON, count)."""
    from PIL import Image
    rng = np.random.default_rng(0)
    things = objects(icons)
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    rows = ["path,boxes,count"]
    for number in range(count):
        canvas = Image.new("RGB", (SIDE, SIDE), (235, 235, 235))
        boxes = []
        for _ in range(int(rng.integers(1, 4))):
            x, y = (int(v) for v in rng.integers(0, SIDE - 16, size=2))
            canvas.paste(things[int(rng.integers(len(things)))], (x, y), mask=None)
            boxes.append([x, y, x + 16, y + 16])
        path = f"images/{number:04d}.png"
        canvas.save(os.path.join(root, path))
        rows.append(f'{path},"{json.dumps(boxes)}",{len(boxes)}')
    with open(os.path.join(root, "labels.csv"), "w") as handle:
        handle.write("\n".join(rows) + "\n")


class Counter(nn.Module):
    """A small CNN with two heads: how many objects (1-3), and the first one's box."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten())
        self.count = nn.Linear(32 * 8 * 8, 3)
        self.box = nn.Linear(32 * 8 * 8, 4)

    def forward(self, images: torch.Tensor) -> Any:
        x = self.features(images.float() / 255.0)
        return self.count(x), self.box(x)


def as_tensors(sample: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON boxes as a float tensor (so collate_fields pads them)."""
    return {**sample, "boxes": torch.tensor(sample["boxes"], dtype=torch.float32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--icons", default=ICONS)
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    root, dst = os.path.join(args.workdir, "detection"), os.path.join(args.workdir, "detection-shards")
    if not os.path.isfile(os.path.join(root, "labels.csv")):
        build_table(root, args.images, args.icons)
    if not os.path.isfile(os.path.join(dst, "manifest.json")):
        report = shardkit.convert(os.path.join(root, "labels.csv"), dst, image_column="path", order="shuffled",
                                  samples_per_shard=100, format="lmdb")
        print(f"converted {report.num_samples} samples into {report.num_shards} shards, skipped {report.skipped}")
    check = shardkit.verify(dst, mode="deep", workers=1)
    print(f"verify: {'OK' if check.ok else check.problems[:3]} ({check.samples_checked} samples, deep)")
    ds = shardkit.open_dataset(dst, decode={"image": "tensor"}, transform=as_tensors)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, drop_last=True,
                                         collate_fn=functools.partial(shardkit.collate_fields, pad=-1))
    model = Counter()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    losses: List[float] = []
    while len(losses) < args.steps:
        for batch in loader:
            assert batch["boxes"].shape[1:] == (int(batch["count"].max()), 4)   # padded with -1
            counts, boxes = model(batch["image"])
            loss = F.cross_entropy(counts, batch["count"] - 1) + F.l1_loss(boxes, batch["boxes"][:, 0]) / SIDE
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == args.steps:
                break
    head, tail = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"{args.steps} steps: loss first {head:.3f} -> last {tail:.3f}")


if __name__ == "__main__":
    main()
