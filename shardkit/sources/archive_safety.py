"""What an archive member may be before shardkit reads it: archives are untrusted input.

A member is read only when it is a regular file whose name stays inside the archive's tree (no
`..`, no absolute path, no drive letter), within MAX_MEMBER_BYTES; links, devices and FIFOs are
never followed or read, and are reported as skipped inputs like links out of a SRC folder. A
compressed archive's stream may inflate to at most inflation_limit() bytes, so a gzip bomb ends
in an error, not in an endless decompression."""
from __future__ import annotations

import io
from typing import Any, Optional, Tuple

from ..errors import SourceError

#: The most bytes one member may declare (and so be read into memory): far above any image.
MAX_MEMBER_BYTES = 256 << 20
#: A compressed archive may inflate to this many times its size ...
MAX_INFLATION = 100
#: ... and always to this many bytes.
MIN_INFLATED_BYTES = 256 << 20


def safe_name(name: str) -> Tuple[Optional[str], str]:
    """(the member's relative POSIX path, "") or (None, why it is not read). Leading "./" and
    empty or "." components are dropped; a name left empty is the archive's root (None, "")."""
    if "\0" in name:
        return None, "its name holds a NUL byte"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return None, f"absolute name {name!r} in the archive; not read"
    parts = [part for part in name.replace("\\", "/").split("/") if part not in ("", ".")]
    if ".." in parts:
        return None, f"name {name!r} leads out of the archive ('..'); not read"
    return "/".join(parts) or None, ""


def too_large(size: int) -> str:
    """Why a member that declares size bytes is not read ("" when it may be)."""
    if size > MAX_MEMBER_BYTES:
        return f"declares {size} bytes, more than the {MAX_MEMBER_BYTES} a member may hold; not read"
    return ""


def inflation_limit(compressed: int) -> int:
    """The most bytes a compressed archive of this size may inflate to."""
    return max(MIN_INFLATED_BYTES, MAX_INFLATION * compressed)


class CountedStream(io.RawIOBase):
    """A decompressed stream that fails (SourceError naming the archive) once more than limit
    bytes came out of it: decompression stops there."""

    def __init__(self, inner: Any, limit: int, shown: str) -> None:
        super().__init__()
        self.inner, self.limit, self.shown, self.count = inner, limit, shown, 0

    def readable(self) -> bool:
        return True

    def read(self, size: Optional[int] = -1) -> bytes:
        wanted = self.limit + 1 - self.count
        data: bytes = self.inner.read(wanted if size is None or size < 0 else min(size, wanted))
        self.count += len(data)
        if self.count > self.limit:
            raise SourceError(f"inflates to more than {self.limit} bytes ({MAX_INFLATION} times its size, at "
                              f"least {MIN_INFLATED_BYTES}); a decompression bomb? not read further",
                              path=self.shown)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


__all__ = ["CountedStream", "MAX_MEMBER_BYTES", "inflation_limit", "safe_name", "too_large"]
