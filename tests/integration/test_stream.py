"""ShardStream over 1-3 ranks and 0-2 DataLoader workers: every sample once per epoch, equal
counts per rank (padded as DistributedSampler pads), no hang with fewer shards than readers,
and mid-epoch resume that yields exactly the batches still to come."""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Dict, List

import pytest
import torch.utils.data

import shardkit
from shardkit.samples import make_image_tree

RANKS, WORKERS = (1, 2, 3), (0, 1, 2)
BATCH = 3


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """41 samples (not a multiple of 2 or 3) in 11 shards, and the same in 2 shards."""
    root = tmp_path_factory.mktemp("stream")
    make_image_tree(str(root / "src"), num_images=41, sizes=(8, 16), seed=4)
    made = {}
    for name, per_shard in (("many", 4), ("few", 25)):
        made[name] = root / name
        shardkit.convert(str(root / "src"), str(made[name]), samples_per_shard=per_shard, quiet=True)
    return made


def _index_of(root: Path) -> Dict[bytes, int]:
    ds = shardkit.open_dataset(root, decode=None)
    return {bytes(ds[index][0]): index for index in range(len(ds))}


def _batches(stream: shardkit.ShardStream, workers: int) -> List[List[int]]:
    index = _index_of(Path(stream.dataset.root))
    loader = torch.utils.data.DataLoader(stream, batch_size=BATCH, num_workers=workers, collate_fn=list,
                                         timeout=60 if workers else 0)
    return [[index[bytes(payload)] for payload, _ in batch] for batch in loader]


def _stream(root: Path, ranks: int, rank: int, **options: object) -> shardkit.ShardStream:
    return shardkit.ShardStream(root, decode=None, num_replicas=ranks, rank=rank, seed=9, shuffle_buffer=5,
                                batch_size=BATCH, **options)


@pytest.mark.parametrize("layout", ["many", "few"])
@pytest.mark.parametrize("ranks, workers", list(itertools.product(RANKS, WORKERS)))
def test_every_sample_once_and_equal_counts_per_rank(datasets: Dict[str, Path], layout: str, ranks: int,
                                                     workers: int) -> None:
    seen: List[int] = []
    per_rank = math.ceil(41 / ranks)
    for rank in range(ranks):
        stream = _stream(datasets[layout], ranks, rank)
        got = [index for batch in _batches(stream, workers) for index in batch]
        assert len(got) == per_rank == len(stream)
        seen.extend(got)
    assert set(seen) == set(range(41))
    assert len(seen) - 41 == per_rank * ranks - 41          # only the padding repeats


def test_drop_last_and_epochs(datasets: Dict[str, Path]) -> None:
    streams = [_stream(datasets["many"], 3, rank, drop_last=True) for rank in range(3)]
    epoch0 = [index for stream in streams for batch in _batches(stream, 0) for index in batch]
    assert len(epoch0) == 39 and len(set(epoch0)) == 39
    for stream in streams:
        stream.set_epoch(1)
    epoch1 = [index for stream in streams for batch in _batches(stream, 0) for index in batch]
    assert len(set(epoch1)) == 39 and epoch1 != epoch0
    again = _stream(datasets["many"], 3, 0, drop_last=True)
    assert [i for b in _batches(again, 0) for i in b] == epoch0[:13]       # the same seed, the same order


@pytest.mark.parametrize("ranks, workers", list(itertools.product(RANKS, WORKERS)))
def test_mid_epoch_resume_yields_the_batches_still_to_come(datasets: Dict[str, Path], ranks: int,
                                                           workers: int) -> None:
    for rank in range(ranks):
        stream = _stream(datasets["many"], ranks, rank)
        stream.set_epoch(2)
        whole = _batches(stream, workers)
        taken = len(whole) // 2
        state = stream.state_dict(batches_seen=taken)
        resumed = _stream(datasets["many"], ranks, rank)
        resumed.load_state_dict(state)
        assert _batches(resumed, workers) == whole[taken:], (rank, taken)
