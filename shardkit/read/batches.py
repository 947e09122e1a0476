"""One-buffer batches of stored bytes: how a batch of raw samples leaves a DataLoader worker.

A list of 256 `bytes` objects crosses from a worker to the main process by pickling, a pipe and
unpickling: several copies of every payload, and most of a raw read's CPU time. `collate_raw`
instead packs a batch into ONE buffer (offsets, labels, then the payloads back to back). Inside a
worker that buffer is one of the worker's shared-memory files, rewritten once no view of its last
batch is left (shared_buffers.py), so only its descriptor crosses the pipe;
elsewhere (num_workers=0, or no memfd_create) it is ordinary memory.
"""
from __future__ import annotations

import operator
import os
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.utils.data

from .shared_buffers import WorkerBuffer, received, worker_buffer

_INT64 = 8


class RawBatch:
    """A batch of variable-length payloads in one buffer: `batch[i]` is sample i's bytes as a
    uint8 tensor view (no copy), `batch.labels` an int64 tensor (None when unlabeled),
    `batch.keys` a list of source keys (None unless the dataset returns keys)."""

    def __init__(self, base: torch.Tensor, count: int, labeled: bool, keys: Optional[List[str]] = None) -> None:
        self._base = base           # uint8, the whole storage: offsets, labels, payload bytes
        self._count = count
        self._labeled = labeled
        self.keys = keys
        header = (count + 1 + (count if labeled else 0)) * _INT64
        words = base[:header].view(torch.int64)
        #: offsets[i]:offsets[i + 1] is sample i's range in `data`; offsets[-1] == data.numel().
        self.offsets: torch.Tensor = words[:count + 1]
        self.labels: Optional[torch.Tensor] = words[count + 1:] if labeled else None
        #: Every payload back to back, in batch order.
        self.data: torch.Tensor = base[header:]
        self._bounds: List[int] = self.offsets.tolist()
        self._buffer: Optional[WorkerBuffer] = None     # the worker's buffer, until it is handed over

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int) -> torch.Tensor:
        if not -self._count <= index < self._count:
            raise IndexError(f"index {index} out of range for a batch of {self._count}")
        index %= self._count
        return self.data[self._bounds[index]:self._bounds[index + 1]]

    def tensors(self) -> List[torch.Tensor]:
        """Every payload as a 1-D uint8 tensor view, e.g. for torchvision.io.decode_jpeg(batch.tensors())."""
        bounds = self._bounds
        return list(self.data.split([bounds[i + 1] - bounds[i] for i in range(self._count)]))

    def pin_memory(self) -> "RawBatch":
        """The batch in page-locked memory (DataLoader(pin_memory=True) calls this): one copy."""
        return RawBatch(self._base.pin_memory(), self._count, self._labeled, self.keys)

    def __reduce__(self) -> Tuple[Any, ...]:
        """A worker's batch pickles as its buffer's descriptor, once; any other pickle carries a
        copy, so a reused buffer is never seen by a process that did not release it."""
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            return _from_worker, (buffer.hand_over(), self._base.numel(), self._count, self._labeled, self.keys)
        return RawBatch, (self._base.clone(), self._count, self._labeled, self.keys)

    def __repr__(self) -> str:
        return f"RawBatch({self._count} samples, {self.data.numel()} bytes, labeled={self._labeled})"


def collate_raw(batch: Sequence[Any]) -> RawBatch:
    """collate_fn for stored bytes (open_dataset(DST, decode=None)): the batch as one RawBatch.

    Takes what the dataset returns per sample: `payload`, `(payload, label)`, `(payload, label,
    key)` or `(payload, key)`, where a payload is bytes-like (bytes, memoryview, a numpy array or
    a uint8 tensor; arrays are taken as their bytes) and a label an integer.
    """
    if not batch:
        raise ValueError("collate_raw got an empty batch")
    payloads, labels, keys = _split(batch)
    count = len(payloads)
    sizes = np.fromiter((memoryview(one).nbytes for one in payloads), dtype=np.int64, count=count)
    words = np.zeros(count + 1 + (count if labels is not None else 0), dtype=np.int64)
    np.cumsum(sizes, out=words[1:count + 1])
    if labels is not None:
        words[count + 1:] = labels
    total = words.nbytes + int(words[count])
    if torch.utils.data.get_worker_info() is not None and hasattr(os, "memfd_create"):
        base, buffer = worker_buffer([words, *payloads], total)
        packed = RawBatch(base, count, labels is not None, keys)
        packed._buffer = buffer
        return packed
    # one C-level concatenation into memory the tensor then owns
    return RawBatch(torch.frombuffer(bytearray().join([words, *payloads]), dtype=torch.uint8), count,
                    labels is not None, keys)


def _from_worker(handle: Any, size: int, count: int, labeled: bool, keys: Optional[List[str]]) -> RawBatch:
    """Unpickling a worker's batch: a map of its buffer, released to the worker when freed."""
    return RawBatch(received(handle, size), count, labeled, keys)


def _split(batch: Sequence[Any]) -> Tuple[List[Any], Optional[List[int]], Optional[List[str]]]:
    """(payloads, labels or None, keys or None) of a batch, every sample shaped like the first."""
    first = batch[0]
    if not isinstance(first, tuple):
        return [_buffer(one, i) for i, one in enumerate(batch)], None, None
    shape = tuple(type(part) is str for part in first[1:])
    if shape not in ((False,), (False, True), (True,)):
        raise TypeError("collate_raw takes samples of payload, (payload, label), (payload, label, key) or "
                        f"(payload, key), not a tuple of {len(first)}")
    payloads, labels, keys = [], [], []
    for i, sample in enumerate(batch):
        if not isinstance(sample, tuple) or len(sample) != len(first):
            raise TypeError(f"collate_raw: sample {i} of the batch is not shaped like sample 0")
        payloads.append(_buffer(sample[0], i))
        if shape[0]:
            keys.append(sample[1])
            continue
        labels.append(_label(sample[1], i))
        if len(shape) == 2:
            keys.append(sample[2])
    return payloads, (None if shape[0] else labels), (keys if any(shape) else None)


def _buffer(payload: Any, position: int) -> Any:
    """A payload as something memoryview takes, contiguous: tensors go through numpy (no copy)."""
    if isinstance(payload, torch.Tensor):
        payload = payload.numpy()
    if isinstance(payload, np.ndarray):
        return np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
    try:
        view = memoryview(payload)
    except TypeError:
        raise TypeError(f"collate_raw: sample {position} is a {type(payload).__name__}, not bytes; "
                        "open the dataset with decode=None") from None
    return payload if view.c_contiguous else view.tobytes()


def _label(label: Any, position: int) -> int:
    """An integer label (int, numpy integer, 0-d integer tensor) as an int; TypeError otherwise."""
    try:
        return operator.index(label)
    except TypeError:
        raise TypeError(f"collate_raw: label of sample {position} is a {type(label).__name__}, not an integer "
                        "(labels a target_transform turns into something else need their own collate_fn)") from None


__all__ = ["RawBatch", "collate_raw"]
