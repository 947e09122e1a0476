"""Why a shard written again from SRC differs from the manifest's record: which keys of the damaged
shard SRC no longer holds, which it holds with other content, which are new. The damaged shard's
own keys and CRC32s are read when it still opens; otherwise the sample table's CRC32s stand in."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import numpy as np

from ..errors import ShardkitError
from ..formats import ShardFormat
from ..formats.checked import open_unchecked
from ..manifest import Manifest
from ..sample_table import SampleTable
from ..schema import SampleSchema

#: Keys named per kind of difference; the rest are counted.
SHOWN_KEYS = 3
#: (keys, CRC32s) of a shard's samples.
Listing = Tuple[List[str], np.ndarray]


def describe_difference(fmt: ShardFormat, manifest: Manifest, dst: str, shard: int, rebuilt: Path) -> str:
    """One clause saying how shard's inputs in SRC differ from what the dataset holds."""
    entry = manifest.shards[shard]
    new = _listing(fmt, manifest.schema, str(rebuilt))
    if new is None:
        return "SRC gives other bytes for it"
    old = _listing(fmt, manifest.schema, str(Path(dst) / entry.path))
    if old is not None and len(old[0]) == entry.num_samples:
        parts = _by_key(old, new)
    else:
        parts = _by_position(_table_crcs(manifest, dst, entry.first_index, entry.num_samples), new)
    if len(new[0]) != entry.num_samples:
        parts.append(f"SRC gives {len(new[0])} samples where the manifest records {entry.num_samples}")
    return "; ".join(parts) or "SRC gives other bytes for it (same keys and contents; other options?)"


def _by_key(old: Listing, new: Listing) -> List[str]:
    old_crc = dict(zip(old[0], old[1].tolist()))
    new_crc = dict(zip(new[0], new[1].tolist()))
    missing = [key for key in old[0] if key not in new_crc]
    changed = [key for key in old[0] if key in new_crc and new_crc[key] != old_crc[key]]
    added = [key for key in new[0] if key not in old_crc]
    return [f"{label} {_names(keys)}" for label, keys in (("missing from SRC:", missing), ("changed in SRC:", changed),
                                                          ("not in the shard but planned for it from SRC:", added))
            if keys]


def _by_position(expected: Optional[np.ndarray], new: Listing) -> List[str]:
    if expected is None:
        return []
    count = min(len(expected), len(new[1]))
    differ = [new[0][i] for i in np.flatnonzero(expected[:count] != new[1][:count]).tolist()]
    return [f"changed or moved in SRC: {_names(differ)}"] if differ else []


def _names(keys: List[str]) -> str:
    shown = ", ".join(repr(key) for key in keys[:SHOWN_KEYS])
    return shown + (f" and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


def _listing(fmt: ShardFormat, schema: SampleSchema, path: str) -> Optional[Listing]:
    """A shard's keys and CRC32s, or None when it is missing or does not open."""
    if not Path(path).is_file():
        return None
    try:
        reader = open_unchecked(fmt, path, schema, None, path)
    except (ShardkitError, OSError, ValueError):
        return None
    try:
        count = len(reader)
        keys = [str(reader.key(i)) for i in range(count)]
        tables = reader.tables()
        crcs = tables[1] if tables is not None else np.array([reader.read(i).crc32 for i in range(count)])
        return keys, np.asarray(crcs, dtype=np.int64)
    except (ShardkitError, OSError, ValueError):
        return None
    finally:
        reader.close()


def _table_crcs(manifest: Manifest, dst: str, first: int, count: int) -> Optional[np.ndarray]:
    """The sample table's CRC32s of global indices [first, first + count), if it is intact."""
    if manifest.sample_table is None:
        return None
    try:
        table = SampleTable(dst, manifest.sample_table, hashed=True)
    except (ShardkitError, OSError, ValueError):
        return None
    return np.asarray(table.crcs[first:first + count], dtype=np.int64)


__all__ = ["describe_difference"]
