"""ShardTable: a manifest's shard list held as columns (numpy arrays and two string lists), so a
dataset of 100,000 shards opens without building an object per shard; ShardEntry is made on demand."""
from __future__ import annotations

import os
import posixpath
import re
from dataclasses import asdict, dataclass
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, overload

import numpy as np

from .errors import ManifestError

SHARDS_DIR = "shards"
#: Field names of a shard entry, in the order the manifest lists them.
FIELDS = ("path", "num_samples", "first_index", "size", "sha256")
#: Most characters a shard path may have (Linux's PATH_MAX): a manifest is untrusted input.
MAX_PATH_CHARS = 4096
#: Most shards a manifest may list: 256 TB of 256 MB shards. A manifest claiming more is refused
#: before any per-shard object or array is made.
MAX_SHARDS = 1_000_000
#: Most samples a manifest may claim in all (about 10^12): counts size every per-sample array a
#: reader or sampler allocates, so a larger claim is refused before anything is allocated.
MAX_SAMPLES = 1 << 40
#: Fewest bytes a sample takes in a shard of any format: its label (int64) and CRC32 (uint32) are
#: stored in the shard (formats/manifest.md); a shard's count may not claim more than its size holds.
MIN_SAMPLE_BYTES = 12
#: A shard path that check_relative_path accepts for sure: one plain name directly in shards/.
_PLAIN_PATH = re.compile(r"shards/(?!\.\.?\Z)[^/\\:\x00]{1,%d}\Z" % (MAX_PATH_CHARS - len("shards/")))


@dataclass(frozen=True)
class ShardEntry:
    """One shard: where it is, how many samples from which global index, its size and hash."""

    path: str
    num_samples: int
    first_index: int
    size: int
    sha256: str

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ShardEntry":
        """Inverse of to_dict; raises ManifestError on missing or mistyped fields."""
        try:
            entry = cls(path=str(data["path"]), num_samples=data["num_samples"], first_index=data["first_index"],
                        size=data["size"], sha256=str(data["sha256"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"manifest shard entry is malformed ({exc}): {_short(data)}") from None
        check_relative_path(entry.path)
        for name in ("num_samples", "first_index", "size"):
            value = getattr(entry, name)
            if type(value) is not int:      # "1", 1.9 and true are not counts
                raise ManifestError(f"manifest shard entry's {name} must be a whole JSON number, not "
                                    f"{type(value).__name__} {_short(value)}", shard=_short(entry.path))
            if not 0 <= value < 2 ** 63:
                raise ManifestError(f"manifest shard entry's {name} {value} is negative or 2**63 or more",
                                    shard=_short(entry.path))
        return entry


def check_relative_path(path: str) -> None:
    """Refuse shard paths that could point outside DST (absolute, '..', backslashes)."""
    if len(path) > MAX_PATH_CHARS or "\0" in path:
        raise ManifestError(f"manifest names an unsafe shard path {_short(path)}: paths hold no NUL and at "
                            f"most {MAX_PATH_CHARS} characters")
    norm = posixpath.normpath(path)
    if (not path or path.startswith("/") or "\\" in path or ":" in path
            or norm.startswith("..") or norm != path or not norm.startswith(SHARDS_DIR + "/")):
        raise ManifestError(f"manifest names an unsafe shard path {path!r}: "
                            f"paths must be relative and inside {SHARDS_DIR}/")


class ShardTable(Sequence[ShardEntry]):
    """The shards of a manifest, column by column: paths, sha256s (lists of str) and num_samples,
    first_index, sizes (int64 arrays). Indexing or iterating yields ShardEntry objects."""

    def __init__(self, paths: List[str], num_samples: np.ndarray, first_index: np.ndarray, sizes: np.ndarray,
                 sha256s: List[str]) -> None:
        self.paths = paths
        self.num_samples = num_samples
        self.first_index = first_index
        self.sizes = sizes
        self.sha256s = sha256s

    @classmethod
    def from_entries(cls, entries: Iterable[ShardEntry]) -> "ShardTable":
        """The table of ShardEntry objects (a conversion's or a merge's result)."""
        entries = list(entries)
        try:
            counts, firsts, sizes = (np.array([getattr(entry, name) for entry in entries], dtype=np.int64)
                                     for name in ("num_samples", "first_index", "size"))
        except OverflowError:
            raise ManifestError("manifest shard entry has a number of 2**63 or more") from None
        return cls([entry.path for entry in entries], counts, firsts, sizes, [entry.sha256 for entry in entries])

    @classmethod
    def from_dicts(cls, items: Any) -> "ShardTable":
        """Parse a manifest's "shards" list; ManifestError on any malformed or unsafe entry."""
        columns = plain_columns(items)
        if columns is None:
            if not isinstance(items, list):
                raise ManifestError(f"manifest shards must be a list, not {type(items).__name__}")
            return cls.from_entries(ShardEntry.from_dict(item) for item in items)
        return cls.from_columns(columns)

    @classmethod
    def from_columns(cls, columns: Dict[str, List[Any]]) -> "ShardTable":
        """The table of plain_columns' result (already checked)."""
        counts, firsts, sizes = (np.array(columns[name], dtype=np.int64)
                                 for name in ("num_samples", "first_index", "size"))
        return cls(columns["path"], counts, firsts, sizes, columns["sha256"])

    def to_dicts(self) -> List[Dict[str, Any]]:
        """The "shards" list of the manifest as written."""
        return [{"path": path, "num_samples": count, "first_index": first, "size": size, "sha256": digest}
                for path, count, first, size, digest in zip(self.paths, self.num_samples.tolist(),
                                                            self.first_index.tolist(), self.sizes.tolist(),
                                                            self.sha256s)]

    def check_consistency(self, where: str, min_sample_bytes: int = MIN_SAMPLE_BYTES) -> None:
        """Counts within what the shards' sizes hold (min_sample_bytes a sample) and MAX_SAMPLES
        in all, shard indices contiguous and shard paths unique."""
        self._check_counts(where, min_sample_bytes)
        expected = np.zeros(len(self), dtype=np.int64)
        np.cumsum(self.num_samples[:-1], out=expected[1:])
        wrong = np.flatnonzero(self.first_index != expected)
        if len(wrong):
            number = int(wrong[0])
            raise ManifestError("starts at index", path=where, shard=self.paths[number],
                                actual=int(self.first_index[number]), expected=int(expected[number]))
        if len(set(self.paths)) != len(self.paths):
            seen = set()
            for path in self.paths:
                if path in seen:
                    raise ManifestError("is listed twice", path=where, shard=path)
                seen.add(path)

    def _check_counts(self, where: str, min_sample_bytes: int) -> None:
        """ManifestError for a shard claiming more samples than its claimed size can hold, or a
        total past MAX_SAMPLES: checked before any per-sample array is allocated from the counts."""
        counts = self.num_samples
        over = np.flatnonzero(counts > self.sizes // max(1, min_sample_bytes))
        if len(over):
            number = int(over[0])
            raise ManifestError(f"claims {int(counts[number])} samples in {int(self.sizes[number])} bytes, more "
                                f"than it can hold at {min_sample_bytes} bytes a sample", path=where,
                                shard=self.paths[number])
        # counts of at most MAX_SAMPLES (2**40) each: a sum over millions of shards fits int64
        total = int(counts.sum()) if (counts <= MAX_SAMPLES).all() else MAX_SAMPLES + 1
        if total > MAX_SAMPLES:
            raise ManifestError(f"claims more than {MAX_SAMPLES} samples in all", path=where)

    def joined(self, root: str) -> "JoinedPaths":
        """Each shard's path under root, made when asked for."""
        return JoinedPaths(root, self.paths)

    def __len__(self) -> int:
        return len(self.paths)

    @overload
    def __getitem__(self, number: int) -> ShardEntry: ...

    @overload
    def __getitem__(self, number: slice) -> List[ShardEntry]: ...

    def __getitem__(self, number: Any) -> Any:
        if isinstance(number, slice):
            return [self[k] for k in range(*number.indices(len(self)))]
        return ShardEntry(self.paths[number], int(self.num_samples[number]), int(self.first_index[number]),
                          int(self.sizes[number]), self.sha256s[number])

    def __iter__(self) -> Iterator[ShardEntry]:
        return (self[number] for number in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ShardTable):
            return self.to_dicts() == other.to_dicts()
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards)"


class JoinedPaths(Sequence[str]):
    """root/path of each shard, joined on access (no list of 100,000 strings up front)."""

    def __init__(self, root: str, paths: List[str]) -> None:
        self.root = root
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, number: Any) -> Any:
        if isinstance(number, slice):
            return [os.path.join(self.root, path) for path in self.paths[number]]
        return os.path.join(self.root, self.paths[number])


def check_shard_count(items: Any, where: str) -> None:
    """ManifestError for a shard list longer than MAX_SHARDS, before any entry is looked at."""
    if isinstance(items, list) and len(items) > MAX_SHARDS:
        raise ManifestError(f"lists {len(items)} shards, more than the {MAX_SHARDS} a manifest may list",
                            path=where)


def _short(value: Any, limit: int = 100) -> str:
    """repr(value), cut to about limit characters: an error message quotes untrusted text."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def plain_columns(items: Any) -> Optional[Dict[str, List[Any]]]:
    """A manifest's "shards" list as columns when every entry is plain (exactly the five fields,
    whole non-negative numbers below 2**63, str hashes, a plain name directly in shards/, as
    shardkit writes them), else None: such a list is parsed entry by entry (ShardEntry.from_dict),
    which accepts what it always accepted and names the bad entry."""
    if not isinstance(items, list) or not all(type(item) is dict and len(item) == len(FIELDS) for item in items):
        return None
    try:
        columns = {name: [item[name] for item in items] for name in FIELDS}
    except KeyError:
        return None
    numbers = columns["num_samples"] + columns["first_index"] + columns["size"]
    if not (all(type(value) is int and 0 <= value < 2 ** 63 for value in numbers)
            and all(type(text) is str for text in columns["sha256"])
            and all(type(path) is str and _PLAIN_PATH.match(path) for path in columns["path"])):
        return None
    return columns


#: One entry of the canonical text (json.dumps, sorted keys, no spaces, ASCII) of a plain column set.
_CANONICAL_ENTRY = '{"first_index":%d,"num_samples":%d,"path":%s,"sha256":%s,"size":%d}'


def canonical_text(columns: Dict[str, List[Any]]) -> str:
    """json.dumps(entries, sort_keys=True, separators=(",", ":"), ensure_ascii=True) of the entries
    plain_columns made these columns from, built without json's per-object walk."""
    quote = encode_basestring_ascii
    return "[" + ",".join([_CANONICAL_ENTRY % (first, count, quote(path), quote(digest), size)
                           for first, count, path, digest, size in zip(
                               columns["first_index"], columns["num_samples"], columns["path"], columns["sha256"],
                               columns["size"])]) + "]"
