"""pull(): copy a dataset from object storage into a local folder, checking every file on the way.

The manifest comes first and is checked (its own checksum, safe shard paths); shards are fetched in
parallel into temporary names inside DST and renamed into place only once their size and sha256
equal the manifest's; the sample table likewise; manifest.json is written last, so DST looks
complete only when it is. An interrupted pull continues where it stopped: a shard already in place
is hashed here, not fetched again."""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from ..errors import DestinationExistsError
from ..integrity import SharedFolderSync, atomic_write_bytes, hash_file, json_bytes
from ..manifest import MANIFEST_NAME, SHARDS_DIR, SKIPPED_NAME, Manifest
from ..remote.location import RemoteLocation
from ..remote.retry import fetch_if_present
from ..remote.transfer import MANIFEST_LIMIT, download_checked, fetch_manifest, run_bounded
from ..runtime.progress import Progress

#: DST/.shardkit/pull.json: the manifest_sha256 of the pull under way, so that a rerun knows DST.
PULL_RECORD = Path(".shardkit") / "pull.json"
#: Temporary names of integrity.temp_path, left by a pull that was killed.
_TEMP_NAME = re.compile(r"\..+\.tmp-[0-9a-f]{16}\Z")


@dataclass
class PullReport:
    """What pull() did: shard files fetched (every field's, in a dataset of fields), and those found
    already in place and checked here."""

    url: str
    dst: str
    num_shards: int
    fetched: int
    reused: int
    bytes_fetched: int
    seconds: float

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def pull(url: str, dst: str, *, storage_options: Optional[Mapping[str, Any]] = None,
         in_flight: Optional[int] = None, quiet: bool = True) -> PullReport:
    """Copy the dataset at url into dst (empty, new, or a pull of the same dataset that stopped)."""
    started = time.monotonic()
    location = RemoteLocation(url, storage_options)
    text, manifest = fetch_manifest(location)
    digest = json.loads(text)["manifest_sha256"]
    root = Path(dst)
    _claim(root, digest)
    shards_dir = root / SHARDS_DIR
    if shards_dir.is_symlink():
        raise DestinationExistsError("is a symbolic link; pull writes shards only inside DST", path=str(shards_dir))
    shards_dir.mkdir(exist_ok=True)
    _remove_temporaries(root)
    fetched = []
    sync = SharedFolderSync()

    files = manifest.shard_files()      # every field's files, in a dataset of named fields

    def one(number: int) -> bool:
        path, size, sha256 = files[number]
        if _intact(root / path, size, sha256):
            return False
        download_checked(location, path, root / path, size, sha256, sync)
        return True

    with Progress(len(files), "pull", quiet=quiet, unit="shard") as bar:
        def done(number: int, was_fetched: bool) -> None:
            bar.advance(1, files[number][1])
            if was_fetched:
                fetched.append(number)
        run_bounded(one, range(len(files)), in_flight, on_done=done)
    _pull_extras(location, root, manifest)
    atomic_write_bytes(root / MANIFEST_NAME, text)
    _release(root)
    return PullReport(url=location.shown, dst=str(dst), num_shards=len(manifest.shards), fetched=len(fetched),
                      reused=len(files) - len(fetched), bytes_fetched=sum(files[n][1] for n in fetched),
                      seconds=time.monotonic() - started)


def _claim(root: Path, digest: str) -> None:
    """Make root ours for this pull: new or empty, or holding this very dataset or a pull of it;
    DestinationExistsError for anything else (its files are never touched)."""
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        raise DestinationExistsError("is not a folder; pull into an empty or new folder", path=str(root))
    if root.is_dir() and os.listdir(root) and _pulled_digest(root) != digest:
        raise DestinationExistsError("is not empty and holds no pull of this dataset (another manifest_sha256); "
                                     "pull into an empty or new folder", path=str(root))
    (root / PULL_RECORD.parent).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(root / PULL_RECORD, json_bytes({"manifest_sha256": digest}))


def _pulled_digest(root: Path) -> Optional[str]:
    """The manifest_sha256 of what root holds: a pull under way, or a finished dataset."""
    for path in (root / PULL_RECORD, root / MANIFEST_NAME):
        try:
            value = json.loads(path.read_bytes()).get("manifest_sha256")
        except (OSError, ValueError, AttributeError):
            continue
        return value if isinstance(value, str) else None
    return None


def _remove_temporaries(root: Path) -> None:
    """The temporary files a killed pull left (only names integrity.temp_path makes)."""
    for folder in (root, root / SHARDS_DIR):
        for name in os.listdir(folder):
            if _TEMP_NAME.match(name) and (folder / name).is_file() and not (folder / name).is_symlink():
                os.unlink(folder / name)


def _intact(path: Path, size: int, sha256: str) -> bool:
    """Whether a regular file of this size and sha256 is at path already (a pull that stopped);
    one that is not is removed, to be fetched again."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise DestinationExistsError("is not a regular file; remove it to pull again", path=str(path))
    if not path.exists():
        return False
    if path.stat().st_size == size and hash_file(path) == sha256:
        return True
    os.unlink(path)
    return False


def _pull_extras(location: RemoteLocation, root: Path, manifest: Manifest) -> None:
    """The sample tables (checked like a shard) and skipped.jsonl (no checksum: a list for people)."""
    for table in manifest.table_files():
        path = root / table["path"]
        if not _intact(path, table["size"], table["sha256"]):
            download_checked(location, table["path"], path, table["size"], table["sha256"])
    skipped = fetch_if_present(location, SKIPPED_NAME, MANIFEST_LIMIT)
    if skipped is not None:
        atomic_write_bytes(root / SKIPPED_NAME, skipped)


def _release(root: Path) -> None:
    """Drop the pull record once manifest.json is in place (and .shardkit/ if nothing else is there)."""
    os.unlink(root / PULL_RECORD)
    try:
        os.rmdir(root / PULL_RECORD.parent)
    except OSError:
        pass
