"""The shared-memory files that carry RawBatches out of DataLoader workers, reused once nothing reads them.

Fresh shared memory is most of what a batch costs on its way out of a worker: the kernel
allocates and zeroes every page a worker writes, and frees them when the main process lets the
batch go. So each worker keeps a few buffers (memfd files, mapped once) and rewrites one only when
no view of its last batch is left anywhere:

- in the worker: its own tensors of the batch are gone (a finalizer on the memoryview they hold);
- in the main process: the buffer's first word reads SENT from the moment the worker hands the
  batch over until the main process's last tensor of it is freed; a finalizer on the main
  process's own mapping (which its tensors hold) then writes FREE.

A buffer is handed over once; a batch sent again is copied. One handed over and never released (a
batch lost on its way) stays out of use; a worker keeps MAX_BUFFERS, and beyond them a batch gets
a buffer of its own, closed when done. The main process maps each batch afresh: it never keeps a
worker's memory after the batch, so a worker that exits leaves nothing behind.
"""
from __future__ import annotations

import errno
import mmap
import multiprocessing.reduction
import os
import weakref
from typing import Any, List, Optional

import torch

#: The release word (SENT or FREE) and padding: the batch starts 64 bytes into the file.
HEADER = 64
_SENT = (1).to_bytes(8, "little")
_FREE = bytes(8)
#: Buffers a worker keeps for reuse (a DataLoader has prefetch_factor batches per worker in flight).
MAX_BUFFERS = 8
_IOV_MAX = 1024     # buffers one pwritev call takes (Linux)
_PAGE = mmap.PAGESIZE


class WorkerBuffer:
    """One memfd of a worker, mapped once, lent to one batch at a time."""

    def __init__(self, capacity: int, pooled: bool) -> None:
        self.capacity = capacity
        self.pooled = pooled        # kept for the next batch; else closed once its batch is done
        self.lent = False           # a tensor of this worker still views the batch in it
        self.written = 0            # bytes of the file written so far: its pages exist
        self.fd = os.memfd_create("shardkit-batch", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, capacity)
            self.map = mmap.mmap(self.fd, capacity)
        except BaseException:
            os.close(self.fd)
            raise

    def free(self) -> bool:
        """Whether no view of the last batch is left: none here, and the main process released it."""
        return not self.lent and self.map[:8] != _SENT

    def fill(self, parts: List[Any], size: int) -> torch.Tensor:
        """parts back to back after the header, as a uint8 tensor over this worker's map of them.

        Pages the file does not have yet are written with pwritev, which allocates them without a
        page fault each; pages it has are copied into through the map, which then holds them too
        (a third less CPU than pwritev's page-by-page lookups)."""
        if HEADER + size <= self.written:
            position = HEADER
            for part in parts:
                end = position + memoryview(part).nbytes
                self.map[position:end] = part
                position = end
        else:
            self._write(parts, size)
        view = memoryview(self.map)[HEADER:HEADER + size]
        tensor = torch.frombuffer(view, dtype=torch.uint8)
        self.lent = True
        weakref.finalize(view, self._returned)
        return tensor

    def _write(self, parts: List[Any], size: int) -> None:
        position = HEADER
        for start in range(0, len(parts), _IOV_MAX):
            group = parts[start:start + _IOV_MAX]
            wanted = sum(memoryview(part).nbytes for part in group)
            if os.pwritev(self.fd, group, position) != wanted:
                raise OSError(errno.ENOSPC, "a batch did not fit in shared memory")
            position += wanted
        self.written = max(self.written, HEADER + size)

    def _returned(self) -> None:
        """The worker's last tensor of the batch is gone."""
        self.lent = False
        if not self.pooled:
            self.close()

    def hand_over(self) -> Any:
        """Mark the batch SENT, and the descriptor to pickle in its place (multiprocessing passes
        it over a Unix socket, as torch does for its shared tensors)."""
        self.map[:8] = _SENT
        return multiprocessing.reduction.DupFd(self.fd)

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


class _Pool:
    """The buffers of one worker process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.buffers: List[WorkerBuffer] = []

    def lend(self, needed: int) -> WorkerBuffer:
        """The smallest free buffer that holds `needed` bytes; else a new one, replacing a free one
        that is too small, kept if there is room."""
        free = [buffer for buffer in self.buffers if buffer.free()]
        fits = [buffer for buffer in free if buffer.capacity >= needed]
        if fits:
            return min(fits, key=lambda buffer: buffer.capacity)
        if free:
            self.buffers.remove(free[0])
            free[0].close()
        capacity = -(-needed * 5 // 4 // _PAGE) * _PAGE     # room for somewhat larger batches
        buffer = WorkerBuffer(capacity, pooled=len(self.buffers) < MAX_BUFFERS)
        if buffer.pooled:
            self.buffers.append(buffer)
        return buffer


_POOL: Optional[_Pool] = None


def worker_buffer(parts: List[Any], size: int) -> "tuple[torch.Tensor, WorkerBuffer]":
    """parts back to back in one of this worker's buffers: (the uint8 tensor of them, the buffer)."""
    global _POOL
    if _POOL is None or _POOL.pid != os.getpid():      # a forked child starts its own
        _POOL = _Pool()
    buffer = _POOL.lend(HEADER + size)
    return buffer.fill(parts, size), buffer


def received(handle: Any, size: int) -> torch.Tensor:
    """The main process's side: a worker's batch as a uint8 tensor over a fresh map of its buffer;
    when the last tensor of it is freed (and the map with it), the buffer is released to the worker."""
    fd = handle.detach()
    try:
        view = mmap.mmap(fd, HEADER + size)
    except BaseException:
        os.close(fd)
        raise
    weakref.finalize(view, _release, fd, os.getpid())
    return torch.frombuffer(view, dtype=torch.uint8, offset=HEADER, count=size)


def _release(fd: int, pid: int) -> None:
    """Write FREE, from the process that received the batch only: a forked child that lets its
    copy go (at its exit, say) must not release a batch its parent still holds."""
    try:
        if os.getpid() == pid:
            os.pwrite(fd, _FREE, 0)
    finally:
        os.close(fd)
