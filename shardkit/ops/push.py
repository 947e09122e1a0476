"""push(): copy a finished local dataset to object storage, so that a reader of the URL never sees
a manifest whose shards are missing.

The dataset is verified first (presence, sizes, counts, the manifest's own checksum) and each shard
is hashed just before it is sent; shards and the sample table go up first, in parallel, and
manifest.json last. Replacing another dataset at the URL (overwrite=True) removes its manifest
before anything else is sent, so its readers never see old and new files mixed."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import CorruptShardError, DestinationExistsError
from ..manifest import MANIFEST_NAME, SHARDS_DIR, SKIPPED_NAME, Manifest, load_manifest, parse_manifest
from ..remote.location import RemoteLocation
from ..remote.retry import any_error, fetch_if_present, retried
from ..remote.transfer import MANIFEST_LIMIT, run_bounded, upload_bytes, upload_checked
from ..runtime.progress import Progress
from .verification import verify


@dataclass
class PushReport:
    """What push() did; uploaded is 0 when the URL already held this very dataset."""

    dst: str
    url: str
    num_shards: int
    uploaded: int
    bytes_uploaded: int
    replaced: bool
    seconds: float

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def push(dst: str, url: str, *, storage_options: Optional[Mapping[str, Any]] = None, overwrite: bool = False,
         in_flight: Optional[int] = None, quiet: bool = True) -> PushReport:
    """Copy the dataset dst to url: shards and sample table first, manifest.json last."""
    started = time.monotonic()
    manifest = load_manifest(dst)
    checked = verify(dst, mode="quick", quiet=True)
    if not checked.ok:
        raise CorruptShardError(f"verify --quick found {len(checked.problems)} problem(s), the first: "
                                f"{checked.problems[0].message}; nothing was pushed", path=dst)
    root = Path(dst)
    text = (root / MANIFEST_NAME).read_bytes()
    location = RemoteLocation(url, storage_options)
    old = _remote_manifest(location)
    report = PushReport(dst=dst, url=location.shown, num_shards=len(manifest.shards), uploaded=0,
                        bytes_uploaded=0, replaced=old is not None, seconds=0.0)
    if old is not None and old[0] == json.loads(text)["manifest_sha256"]:
        report.replaced = False
        report.seconds = time.monotonic() - started
        return report
    if old is not None:
        if not overwrite:
            raise DestinationExistsError("holds another dataset (its manifest_sha256 differs); pass --overwrite "
                                         "to replace it", path=location.shown)
        retried(location, MANIFEST_NAME, "remove", lambda: location.fs.rm_file(location.path(MANIFEST_NAME)))
    if location.is_local():        # object stores have no folders (and s3fs's makedirs would create a bucket)
        retried(location, SHARDS_DIR, "create", lambda: location.fs.makedirs(location.path(SHARDS_DIR), exist_ok=True))
    files = _files(root, manifest)
    with Progress(len(files), "push", quiet=quiet, unit="file") as bar:
        run_bounded(lambda item: upload_checked(location, root / item[0], root, *item),
                    files, in_flight, on_done=lambda item, _: bar.advance(1, item[1]))
    if (root / SKIPPED_NAME).is_file():
        upload_bytes(location, SKIPPED_NAME, (root / SKIPPED_NAME).read_bytes())
    upload_bytes(location, MANIFEST_NAME, text)
    if old is not None:
        _remove_unlisted(location, old[1], manifest)
    report.uploaded = len(files)
    report.bytes_uploaded = sum(size for _, size, _ in files)
    report.seconds = time.monotonic() - started
    return report


def _files(root: Path, manifest: Manifest) -> List[Tuple[str, int, str]]:
    """(path, size, sha256) of every file the manifest checks: the shards (every field's, in a
    dataset of named fields), then the sample tables."""
    return manifest.shard_files() + [(table["path"], table["size"], table["sha256"])
                                     for table in manifest.table_files()]


def _remote_manifest(location: RemoteLocation) -> Optional[Tuple[str, Manifest]]:
    """(manifest_sha256, manifest) of the dataset at the URL now, or None where there is none."""
    text = fetch_if_present(location, MANIFEST_NAME, MANIFEST_LIMIT)
    if text is None:
        return None
    manifest = parse_manifest(text, location.name(MANIFEST_NAME))
    return json.loads(text)["manifest_sha256"], manifest


def _remove_unlisted(location: RemoteLocation, old: Manifest, new: Manifest) -> None:
    """After a replacement, the old dataset's shards the new manifest does not list (best effort:
    only files the old manifest names, never anything else at the URL)."""
    listed = {path for path, _, _ in new.shard_files()}
    for path, _, _ in old.shard_files():
        if path not in listed:
            any_error(lambda: location.fs.rm_file(location.path(path)))
