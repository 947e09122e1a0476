"""Encoded: the one value both paths share — a sample's stored payload, its label and its CRC32."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

Payload = Union[bytes, memoryview, np.ndarray]

#: Label stored for unlabeled samples.
NO_LABEL = -1


def payload_crc32(payload: Payload) -> int:
    """zlib's CRC-32 of the payload bytes as stored (arrays: their C-order bytes)."""
    if isinstance(payload, np.ndarray):
        payload = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
    return zlib.crc32(payload) & 0xFFFFFFFF


@dataclass(frozen=True)
class Encoded:
    """A sample ready to store or just read: payload (bytes or fixed-shape array), label, CRC32."""

    payload: Payload
    label: int = NO_LABEL
    crc32: int = 0

    @classmethod
    def make(cls, payload: Payload, label: Optional[int] = None) -> "Encoded":
        """Build an Encoded and compute its CRC32."""
        return cls(payload, NO_LABEL if label is None else int(label), payload_crc32(payload))

    @property
    def nbytes(self) -> int:
        """Size of the payload in bytes."""
        if isinstance(self.payload, np.ndarray):
            return int(self.payload.nbytes)
        return len(self.payload)

    def crc_ok(self) -> bool:
        """Whether the payload still matches its CRC32."""
        return payload_crc32(self.payload) == self.crc32
