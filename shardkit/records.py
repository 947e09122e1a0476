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
    if type(payload) is bytes:          # the usual payload, without the checks below
        return zlib.crc32(payload)
    if isinstance(payload, np.ndarray):
        payload = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
    return zlib.crc32(payload) & 0xFFFFFFFF


def payload_nbytes(payload: Payload) -> int:
    """Size of a payload in bytes."""
    return int(payload.nbytes) if isinstance(payload, np.ndarray) else len(payload)


@dataclass
class Encoded:
    """A sample ready to store or just read: payload (bytes or fixed-shape array), label, CRC32,
    and the key of the input it came from (None where unknown: shards older than keys).

    Not frozen: a frozen dataclass sets each field through object.__setattr__, and one is made
    per sample read (527 against 177 ns to make). Nothing changes one after it is made."""

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
        return payload_nbytes(self.payload)

    def crc_ok(self) -> bool:
        """Whether the payload still matches its CRC32."""
        return payload_crc32(self.payload) == self.crc32


class KeyRun(Sequence[str]):
    """The keys of rows of one file, `prefix` + a number per row: first, first + 1, ... for i <
    length (kept as those three values), or the given increasing numbers (the lines of rows that
    span several lines); never a string per row (formats pack such runs without making the strings)."""

    def __init__(self, prefix: str, first: int, length: int, numbers: Optional[np.ndarray] = None) -> None:
        if numbers is not None:
            numbers = np.asarray(numbers, dtype=np.int64).reshape(-1)
            first, length = (int(numbers[0]) if len(numbers) else 0), len(numbers)
            if len(numbers) and (int(numbers.min()) < 0 or np.any(np.diff(numbers) <= 0)):
                raise ValueError("the numbers of a run of keys are >= 0 and increasing")
        if first < 0 or length < 0:
            raise ValueError(f"a run of keys starts at a row >= 0 and holds >= 0 keys, not {first} and {length}")
        self.prefix, self.first, self.length, self.numbers = prefix, first, length, numbers

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> "KeyRun": ...

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            start, stop, step = index.indices(self.length)
            if step != 1:
                raise ValueError("a run of keys is sliced with step 1 only")
            if self.numbers is not None:
                return KeyRun(self.prefix, 0, 0, self.numbers[start:stop])
            return KeyRun(self.prefix, self.first + start, max(0, stop - start))
        if not -self.length <= index < self.length:
            raise IndexError(f"key {index} of a run of {self.length}")
        return f"{self.prefix}{self.number(index % self.length)}"

    def number(self, index: int) -> int:
        """The number in key `index` (0 <= index < length)."""
        return self.first + index if self.numbers is None else int(self.numbers[index])

    def number_array(self) -> np.ndarray:
        """Every key's number, in order (uint64)."""
        if self.numbers is None:
            return np.arange(self.first, self.first + self.length, dtype=np.uint64)
        return self.numbers.astype(np.uint64)

    def end(self) -> int:
        """One more than the largest number (first when empty)."""
        return self.number(self.length - 1) + 1 if self.length else self.first

    def __iter__(self) -> Iterator[str]:
        prefix = self.prefix
        numbers = range(self.first, self.first + self.length) if self.numbers is None else self.numbers.tolist()
        return (f"{prefix}{number}" for number in numbers)


class EncodedRows(Sequence[Encoded]):
    """Consecutive samples held as columns: row i is Encoded(payloads[i], labels[i], crcs[i],
    keys[i]), with labels (int64) and CRC32s (uint32) held as arrays. payloads is one block of
    fixed-shape arrays (an ndarray, first axis the rows) or a list of payloads stored as their
    bytes. Sources of many samples (CSV rows, image files) and the writer of fields hand these
    over so that no Python object per sample is made unless a format asks for one."""

    def __init__(self, payloads: Union[np.ndarray, List[Payload]], labels: Union[np.ndarray, Sequence[int]],
                 crcs: Union[np.ndarray, Sequence[int]], keys: Optional[Sequence[Optional[str]]] = None) -> None:
        self.payloads = np.ascontiguousarray(payloads) if isinstance(payloads, np.ndarray) else payloads
        self.labels = np.asarray(labels, dtype=np.int64).reshape(-1)
        self.crcs = (np.asarray(crcs, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32) \
            if not isinstance(crcs, np.ndarray) or crcs.dtype != np.uint32 else crcs.reshape(-1)
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
        return Encoded(self.payloads[index], int(self.labels[index]), int(self.crcs[index]),
                       None if self.keys is None else self.keys[index])

    def with_keys(self, keys: Sequence[str]) -> "EncodedRows":
        """The same rows carrying these keys (one per row)."""
        return EncodedRows(self.payloads, self.labels, self.crcs, keys)

    def __iter__(self) -> Iterator[Encoded]:
        return map(Encoded, self.payloads, self.labels.tolist(), self.crcs.tolist(),
                   repeat(None) if self.keys is None else self.keys)
