"""One side of the mid-epoch resume test, run in its own process:

    python -m tests.training.resume_run DST OUT.json RANKS WORKERS STOP STATE  (full epoch, then STOP batches and save)
    python -m tests.training.resume_run DST OUT.json RANKS WORKERS -1 STATE    (load STATE, read the rest)

OUT.json gets, per rank, the sha1 of each sample's stored bytes in the order they were read.
"""
from __future__ import annotations

import hashlib
import json
import sys
from typing import Any, List

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import shardkit

EPOCH, BATCH = 1, 8


def digests(batch: List[Any]) -> List[str]:
    """collate_fn: each sample's stored bytes as a sha1 (picklable, order kept)."""
    return [hashlib.sha1(bytes(memoryview(payload))).hexdigest()[:12] for payload, _ in batch]


def loader_for(dst: str, ranks: int, rank: int, workers: int) -> StatefulDataLoader:
    ds = shardkit.open_dataset(dst, decode=None)
    sampler = shardkit.ShardAwareSampler(ds, seed=5, num_replicas=ranks, rank=rank)
    sampler.set_epoch(EPOCH)
    return StatefulDataLoader(ds, batch_size=BATCH, sampler=sampler, num_workers=workers, collate_fn=digests)


def main(dst: str, out: str, ranks: int, workers: int, stop: int, state_file: str) -> None:
    result = {}
    for rank in range(ranks):
        if stop >= 0:
            full = [d for batch in loader_for(dst, ranks, rank, workers) for d in batch]
            loader = loader_for(dst, ranks, rank, workers)
            head = []
            for number, batch in enumerate(loader):
                head.extend(batch)
                if number + 1 == stop:
                    break
            torch.save(loader.state_dict(), f"{state_file}.{rank}")
            result[rank] = {"full": full, "head": head}
        else:
            loader = loader_for(dst, ranks, rank, workers)
            loader.load_state_dict(torch.load(f"{state_file}.{rank}", weights_only=True))
            loader.sampler.set_epoch(EPOCH)
            result[rank] = {"tail": [d for batch in loader for d in batch]}
    with open(out, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
