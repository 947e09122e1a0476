"""The built-in demo: sample tree -> convert -> verify -> one shuffled epoch through a DataLoader."""
from __future__ import annotations

import os
import tempfile
import time
from typing import Any, Callable, Optional

import numpy as np

DEMO_SIDE = 64


def to_small_tensor(image: Any) -> Any:
    """Demo transform: PIL image -> 3x64x64 uint8 tensor (so a batch can be stacked)."""
    import torch
    small = image.resize((DEMO_SIDE, DEMO_SIDE))
    return torch.from_numpy(np.asarray(small).copy()).permute(2, 0, 1)


def tree_folder(workdir: str, images: int) -> str:
    """Where the demo draws its sample tree: one folder per image count (`images-400`), so a
    rerun with another --images never converts the tree drawn for the last one."""
    return os.path.join(workdir, f"images-{images}")


def run_demo(workdir: Optional[str], format_name: str = "hdf5", images: int = 400,
             echo: Callable[[str], None] = print) -> float:
    """Run the demo in workdir (a temporary folder if None); returns the epoch's samples/s."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="shardkit-demo-") as tmp:
            return run_demo(tmp, format_name, images, echo)
    import torch.utils.data

    import shardkit
    from ..errors import UsageError
    from ..samples import make_image_tree
    if images < 1:
        raise UsageError(f"--images must be at least 1, not {images}")
    src, dst = tree_folder(workdir, images), os.path.join(workdir, f"dataset-{format_name}")
    if os.path.isdir(src):
        echo(f"1/4 reusing the {images} sample images drawn earlier in {src}")
    else:
        echo(f"1/4 drawing {images} sample images (JPEG and PNG, 4 classes, odd sizes) in {src}")
        make_image_tree(src, images)
    echo(f"2/4 shardkit convert {src} {dst} --format {format_name} --samples-per-shard 64 --workers 2")
    report = shardkit.convert(src, dst, format=format_name, samples_per_shard=64, workers=2, overwrite=True)
    echo(f"    {report.num_samples} samples in {report.num_shards} shards, {report.skipped} skipped, "
         f"{report.samples_per_second:.0f} samples/s")
    echo(f"3/4 shardkit verify {dst} --deep")
    verified = shardkit.verify(dst, mode="deep")
    echo(f"    {'OK' if verified.ok else 'FAILED'}: {verified.shards_checked} shards, "
         f"{verified.samples_checked} samples checked")
    if not verified.ok:
        raise SystemExit(1)
    echo("4/4 one shuffled epoch: DataLoader(batch_size=32, num_workers=2, ShardAwareSampler)")
    dataset = shardkit.open_dataset(dst, decode="pil", transform=to_small_tensor)
    sampler = shardkit.ShardAwareSampler(dataset, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2,
                                         worker_init_fn=shardkit.worker_init_fn)
    started = time.perf_counter()
    seen = 0
    counts = np.zeros(len(dataset.classes), dtype=np.int64)
    shape = None                    # the first batch's: a full one, unless the epoch is one short batch
    for images_batch, labels in loader:
        shape = shape or tuple(images_batch.shape)
        seen += len(labels)
        counts += np.bincount(labels.numpy(), minlength=len(counts))
    rate = seen / (time.perf_counter() - started)
    echo(f"    read {seen} samples ({', '.join(f'{n} {c}' for c, n in zip(dataset.classes, counts))}) "
         f"at {rate:.0f} samples/s, batches of {shape}")
    return rate
