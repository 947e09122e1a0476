"""Encoded: the one value both paths share — a sample's stored payload, its label and its CRC32."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from itertools import repeat
from typing import Iterator, List, Optional, Sequence, Union, overload

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
    """A sample ready to store or just read: payload (bytes or fixed-shape array), label, CRC32,
    and the key of the input it came from (None where unknown: shards older than keys)."""

    payload: Payload
    label: int = NO_LABEL
    crc32: int = 0
    key: Optional[str] = None

    @classmethod
    def make(cls, payload: Payload, label: Optional[int] = None, key: Optional[str] = None) -> "Encoded":
        """Build an Encoded and compute its CRC32."""
        return cls(payload, NO_LABEL if label is None else int(label), payload_crc32(payload), key)

    @property
    def nbytes(self) -> int:
        """Size of the payload in bytes."""
        if isinstance(self.payload, np.ndarray):
            return int(self.payload.nbytes)
        return len(self.payload)

    def crc_ok(self) -> bool:
        """Whether the payload still matches its CRC32."""
        return payload_crc32(self.payload) == self.crc32


class EncodedRows(Sequence[Encoded]):
    """Consecutive samples held as columns: row i is Encoded(payloads[i], labels[i], crcs[i],
    keys[i]). payloads is one block of fixed-shape arrays (an ndarray, first axis the rows) or a
    list of byte strings. Sources of many samples (CSV rows, image files) hand these over so that
    no Python object per sample is made unless a format asks for one."""

    def __init__(self, payloads: Union[np.ndarray, List[bytes]], labels: List[int], crcs: List[int],
                 keys: Optional[Sequence[str]] = None) -> None:
        self.payloads = np.ascontiguousarray(payloads) if isinstance(payloads, np.ndarray) else payloads
        self.labels = labels
        self.crcs = crcs
        self.keys = keys

    def __len__(self) -> int:
        return len(self.labels)

    @overload
    def __getitem__(self, index: int) -> Encoded: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Encoded]: ...

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return EncodedRows(self.payloads[index], self.labels[index], self.crcs[index],
                               None if self.keys is None else self.keys[index])
        return Encoded(self.payloads[index], self.labels[index], self.crcs[index],
                       None if self.keys is None else self.keys[index])

    def with_keys(self, keys: Sequence[str]) -> "EncodedRows":
        """The same rows carrying these keys (one per row)."""
        return EncodedRows(self.payloads, self.labels, self.crcs, keys)

    def __iter__(self) -> Iterator[Encoded]:
        return map(Encoded, self.payloads, self.labels, self.crcs, repeat(None) if self.keys is None else self.keys)
