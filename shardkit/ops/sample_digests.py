"""What duplicates reads of samples: the stored CRC32 of every sample (from the sample table, no
payload read), and 128-bit digests (BLAKE2b) of stored payloads or of decoded pixels, computed by
tasks of a few thousand samples each, in this process or in worker processes.

A stored digest covers the payload's layout (bytes, or an array's dtype and shape) and its bytes
as stored (before a format's own compression); a pixel digest covers the decoded RGB image (height,
width, channels and every pixel) as `open_dataset(decode="numpy")` gives it. A sample whose bytes
do not match its stored CRC32, or that does not decode, is reported and left out.

A sample of named fields is all of its columns: its signature names every column with its layout,
its CRC32 candidate key mixes the columns' CRC32s, and its digest covers each column's bytes (with
their length), in column order.
"""
from __future__ import annotations

import hashlib
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ShardkitError
from ..records import NO_LABEL
from ..runtime.workers import run_in_workers
from ..sample_table import read_rows

STORED, PIXELS = "stored", "pixels"
#: Samples per task: enough that a worker's round trip is small next to the task, few enough to spread.
TASK_SAMPLES = {STORED: 8192, PIXELS: 512}
#: Samples read at a time within a task.
_CHUNK = 256
#: What starting the workers costs, in seconds (each is spawned and imports torch): while the tasks
#: left would take less than this here, they run here.
WORKER_START_SECONDS = 1.0


@dataclass
class DigestTask:
    """Samples (global indices, ascending) of one dataset to digest: STORED or PIXELS."""

    dst: str
    indices: np.ndarray
    mode: str
    dataset: int = 0


@dataclass
class Digests:
    """Digests of a task's samples (those left out are reported in problems, not listed)."""

    dataset: int
    indices: np.ndarray
    k1: np.ndarray
    k2: np.ndarray
    problems: List[str] = field(default_factory=list)


def payload_signature(schema: Any) -> bytes:
    """What a stored payload is, besides its bytes: equal bytes of another layout are no duplicate."""
    if schema.is_array:
        return f"array:{np.dtype(schema.dtype).str}:{tuple(schema.shape)}".encode()
    return b"bytes"


def sample_signature(ds: Any) -> bytes:
    """What a dataset's samples are, besides their bytes: the payload's layout, or for named fields
    each column with its layout, in column order."""
    if ds.manifest.fields is None:
        return payload_signature(ds.manifest.schema)
    return b"fields:" + b";".join(column.encode() + b"=" + payload_signature(records.manifest.schema)
                                  for column, records in ds.records.items())


def stored_crcs(ds: Any) -> np.ndarray:
    """Every sample's stored CRC32 (uint32): the sample table's column when the dataset has one
    (checked against its sha256), else each record's, read through the dataset. For named fields,
    the columns' CRC32s mixed into one (a candidate key: equal samples have equal ones)."""
    if ds.manifest.fields is not None:
        mixed = np.zeros(len(ds), dtype=np.uint64)
        for records in ds.records.values():
            mixed = mixed * np.uint64(0x9E3779B97F4A7C15) + stored_crcs(records).astype(np.uint64)
        return (mixed ^ (mixed >> np.uint64(32))).astype(np.uint32)
    entry = ds.manifest.sample_table
    if entry is not None:
        return read_rows(ds.root, entry, "crc32")
    crcs = np.empty(len(ds), dtype=np.uint32)
    for start in range(0, len(ds), _CHUNK):
        stop = min(len(ds), start + _CHUNK)
        crcs[start:stop] = [encoded.crc32 for encoded in ds.read_encoded_many(range(start, stop))]
    return crcs


_OPEN: Dict[Tuple[int, str, str], Any] = {}


def _dataset(dst: str, mode: str) -> Any:
    """This process's dataset of dst for a mode (stored payloads, or decoded numpy pixels)."""
    key = (os.getpid(), dst, mode)
    if key not in _OPEN:
        from ..read.dataset import open_dataset
        _OPEN[key] = open_dataset(dst, decode=None if mode == STORED else "numpy")
    return _OPEN[key]


def close_datasets() -> None:
    """Close the datasets this process opened for digests."""
    for ds in _OPEN.values():
        ds.close()
    _OPEN.clear()


def digest_samples(task: DigestTask) -> Digests:
    """The task's digests (module level: worker processes run it)."""
    ds = _dataset(task.dst, task.mode)
    signature = sample_signature(ds)
    kept: List[int] = []
    digests: List[bytes] = []
    problems: List[str] = []
    for start in range(0, len(task.indices), _CHUNK):
        chunk = task.indices[start:start + _CHUNK].tolist()
        for index, encoded in zip(chunk, ds.read_encoded_many(chunk)):
            values = list(encoded.values()) if isinstance(encoded, dict) else [encoded]
            if any(zlib.crc32(value.payload) & 0xFFFFFFFF != value.crc32 for value in values):
                problems.append(_problem(task.dst, ds, index, "its stored bytes do not match their CRC32 "
                                                              "(damaged: run shardkit verify --deep)"))
                continue
            try:
                digest = _digest(signature, values, isinstance(encoded, dict)) if task.mode == STORED else \
                    _pixels(ds, encoded, index)
            except ShardkitError as exc:
                problems.append(_problem(task.dst, ds, index, f"does not decode ({exc.problem or exc})"))
                continue
            kept.append(index)
            digests.append(digest)
    words = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)
    return Digests(task.dataset, np.array(kept, dtype=np.int64), words[:, 0].copy(), words[:, 1].copy(), problems)


def _digest(signature: bytes, values: List[Any], fields: bool) -> bytes:
    """The digest of a sample's stored payloads: its one payload, or each column's after its length
    and its presence (an absent optional field and an empty value are not the same sample)."""
    digest = hashlib.blake2b(signature, digest_size=16)
    for value in values:
        payload = value.payload
        data = payload if isinstance(payload, (bytes, memoryview)) else np.ascontiguousarray(payload)
        if fields:
            digest.update(memoryview(data).nbytes.to_bytes(8, "little") + bytes([value.label != NO_LABEL]))
        digest.update(data)
    return digest.digest()


def _pixels(ds: Any, encoded: Any, index: int) -> bytes:
    """The digest of a sample's decoded pixels (shape and values)."""
    sample = ds.finish(encoded, index)
    pixels = np.ascontiguousarray(sample[0] if isinstance(sample, tuple) else sample)
    digest = hashlib.blake2b(repr((pixels.dtype.str, pixels.shape)).encode(), digest_size=16)
    digest.update(pixels)
    return digest.digest()


def _problem(dst: str, ds: Any, index: int, what: str) -> str:
    try:
        key = ds.key(index)
    except ShardkitError:
        key = None
    return f"{dst}: sample {index}" + (f" ({key})" if key else "") + f": {what}"


def tasks_for(dst: str, dataset: int, indices: np.ndarray, mode: str) -> List[DigestTask]:
    """indices cut into tasks of TASK_SAMPLES[mode]."""
    size = TASK_SAMPLES[mode]
    return [DigestTask(dst, indices[start:start + size], mode, dataset) for start in range(0, len(indices), size)]


def run_digests(tasks: Sequence[DigestTask], workers: int, on_done: Callable[[Digests], None]) -> None:
    """Every task's digests to on_done: here while the tasks left would take less than starting
    workers costs (or with one worker), the rest in spawned worker processes."""
    total = sum(len(task.indices) for task in tasks)
    started, done, number = time.monotonic(), 0, 0
    while number < len(tasks) and (workers == 1 or not done
                                   or _quicker_here(time.monotonic() - started, done, total - done)):
        on_done(digest_samples(tasks[number]))
        done += len(tasks[number].indices)
        number += 1
    rest = list(tasks[number:])
    if rest:
        run_in_workers(digest_samples, rest, workers, on_done=lambda _, digests: on_done(digests))


def _quicker_here(elapsed: float, done: int, left: int) -> bool:
    """Whether `left` samples take less here, at the rate so far, than starting workers."""
    return elapsed * left < WORKER_START_SECONDS * max(done, 1)


def payload_digests(dst: str, indices: Sequence[int]) -> Optional[Digests]:
    """Stored digests of a few samples, read here (None for none)."""
    if not len(indices):
        return None
    return digest_samples(DigestTask(dst, np.asarray(sorted(indices), dtype=np.int64), STORED))
