"""A worker's RawBatch buffers are reused, and only once no view of their last batch is left."""
from __future__ import annotations

import gc
import os
import pickle
from typing import Any, Dict, List, Optional, Tuple

import pytest
import torch
import torch.utils.data

import shardkit
from shardkit.read.shared_buffers import MAX_BUFFERS


def _samples(count: int) -> List[Tuple[bytes, int]]:
    """Samples whose bytes differ from every other sample's, so that a rewritten buffer shows."""
    return [(index.to_bytes(4, "little") * (50 + index % 13), index) for index in range(count)]


def _buffer_file(tensor: torch.Tensor) -> Optional[int]:
    """The inode of the worker's shared-memory file the tensor's memory maps, or None."""
    address = tensor.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, _, _, _, inode, *name = line.split()
            start, end = (int(part, 16) for part in span.split("-"))
            if start <= address < end:
                return int(inode) if name and name[0] == "/memfd:shardkit-batch" else None
    return None


def _loader(samples: List[Tuple[bytes, int]], batch_size: int, **options: Any) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(samples, batch_size=batch_size, num_workers=1,
                                       collate_fn=shardkit.collate_raw, **options)


@pytest.mark.parametrize("context", [None, "spawn"])
def test_a_worker_reuses_the_buffers_the_main_process_released(context: Optional[str]) -> None:
    samples = _samples(160)
    files = []
    for position, batch in enumerate(_loader(samples, 4, multiprocessing_context=context)):
        assert [(bytes(view.numpy()), label) for view, label in zip(batch.tensors(), batch.labels.tolist())] == \
            samples[4 * position:4 * position + 4]
        files.append(_buffer_file(batch.data))
        del batch
    assert None not in files
    # 40 batches in at most: prefetch_factor (2) in flight, the one in hand, one being released
    assert len(set(files)) <= 4


def test_no_buffer_is_rewritten_while_a_view_of_its_batch_lives() -> None:
    samples = _samples(240)
    kept: Dict[int, Any] = {}       # batch -> what the main process still holds of it
    for position, batch in enumerate(_loader(samples, 4)):
        if position % 3 == 0:
            kept[position] = batch                          # the whole batch
        elif position % 3 == 1:
            kept[position] = batch.tensors()[2]             # one tensor view
        else:
            kept[position] = batch[1].numpy()               # a numpy array over a view
        del batch
    gc.collect()
    for position, held in kept.items():
        first = 4 * position
        if position % 3 == 0:
            assert [bytes(view.numpy()) for view in held.tensors()] == [s for s, _ in samples[first:first + 4]]
            assert held.labels.tolist() == list(range(first, first + 4))
        elif position % 3 == 1:
            assert bytes(held.numpy()) == samples[first + 2][0]
        else:
            assert bytes(held) == samples[first + 1][0]
    files = [_buffer_file(held) for position, held in kept.items() if position % 3 == 1]
    assert len(set(files)) == len(files) > MAX_BUFFERS     # all alive at once: never shared


def test_a_batch_sent_on_is_a_copy() -> None:
    samples = _samples(8)
    (batch,) = list(_loader(samples, 8))
    again = pickle.loads(pickle.dumps(batch))
    assert _buffer_file(again.data) is None and _buffer_file(batch.data) is not None
    assert [bytes(view.numpy()) for view in again.tensors()] == [payload for payload, _ in samples]
    assert again.labels.tolist() == batch.labels.tolist() == list(range(8))


def test_a_forked_child_letting_its_copy_go_releases_nothing() -> None:
    """A child forked while the main process holds a batch (and which drops its copy) must not
    tell the worker that the batch is free."""
    samples = _samples(160)
    batches = iter(_loader(samples, 4))
    held = next(batches)
    child = os.fork()
    if child == 0:      # the child lets its copy of the batch go, then leaves at once
        try:
            del held
            gc.collect()
        finally:
            os._exit(0)
    assert os.waitpid(child, 0)[1] == 0
    for _ in batches:       # the worker fills and refills its buffers
        pass
    assert [bytes(view.numpy()) for view in held.tensors()] == [payload for payload, _ in samples[:4]]
