"""Helpers shared by the format tests: make samples, write one shard through a format."""
from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any, List

import numpy as np

from shardkit.formats import get_format
from shardkit.records import Encoded
from shardkit.schema import SampleSchema


def sized_samples(count: int, size: int, seed: int = 0) -> list:
    """count random byte payloads of size, size+1, ... bytes, labels cycling 0..4."""
    rng = np.random.default_rng(seed)
    return [Encoded.make(rng.integers(0, 256, size + index, dtype=np.uint8).tobytes(), index % 5)
            for index in range(count)]


def write_shard(fmt_name: str, path: Path, schema: SampleSchema, samples: list, dataset_id: str = "") -> None:
    """Write samples into one shard file at path with the named format's writer."""
    fmt = get_format(fmt_name)
    writer = fmt.open_writer(str(path), schema, fmt.writer_options(), dataset_id)
    for sample in samples:
        writer.append(sample)
    writer.close()


def payload_bytes(payload) -> bytes:
    """The bytes of a stored payload, whatever bytes-like or array type a reader returned."""
    return payload.tobytes() if isinstance(payload, np.ndarray) else bytes(memoryview(payload))


def trace_peaks(module: Any, name: str, monkeypatch: Any) -> List[int]:
    """Replace module.name with a wrapper that records each call's peak of Python allocations
    (tracemalloc); returns the list the peaks are appended to."""
    peaks: List[int] = []
    original = getattr(module, name)

    def traced(*args: Any, **kwargs: Any) -> Any:
        tracemalloc.start()
        try:
            result = original(*args, **kwargs)
            peaks.append(tracemalloc.get_traced_memory()[1])
            return result
        finally:
            tracemalloc.stop()
    monkeypatch.setattr(module, name, traced)
    return peaks
