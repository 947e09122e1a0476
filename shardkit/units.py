"""Parsing of the small user vocabularies: sizes such as "256MB" and parts such as "3/8"."""
from __future__ import annotations

import re
from typing import Tuple

from .errors import UsageError

_UNITS = {
    "": 1, "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
    "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: "str | int") -> int:
    """Bytes in "256MB" (powers of 10), "1GiB" (powers of 2) or a plain integer."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(str(text))
        unit = match.group(2).upper() if match else None
        if not match or unit not in _UNITS:
            raise UsageError(f"invalid size {text!r}: use a number with KB/MB/GB (powers of 10) "
                             "or KiB/MiB/GiB (powers of 2), e.g. 256MB")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise UsageError(f"invalid size {text!r}: must be positive")
    return value


def format_size(num_bytes: float) -> str:
    """A human-readable size in powers of 10 (matching parse_size's KB/MB/GB)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(num_bytes) < 1000 or unit == "TB":
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1000
    raise AssertionError("unreachable")


def parse_part(text: str) -> Tuple[int, int]:
    """(I, N) from "I/N" with 0 <= I < N."""
    match = re.match(r"^\s*(\d+)\s*/\s*(\d+)\s*$", str(text))
    if not match:
        raise UsageError(f"invalid part {text!r}: use I/N, e.g. 0/4")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"invalid part {text!r}: need 0 <= I < N")
    return index, count
