"""Tables at a URL (one table file, or a folder of them): fetched into a private temporary folder,
then read as local tables (sources/tabular/). Arrow parses a table at scan time anyway, and
Parquet needs a seekable file; the copies keep their names and the store's modification times,
so the dataset is the one the same files on local disk would give. Every message and skipped
input names the URL, never the temporary folder, which close() removes."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
import weakref
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import ShardkitError, UsageError
from ..integrity import create_new, temp_path
from ..options import ImageOptions, PlanOptions, RunOptions, TabularOptions
from ..remote.location import RemoteLocation
from ..remote.retry import Mismatch, retried
from ..remote.transfer import run_bounded, size_guard
from .archive_safety import safe_name
from .base import Outcome, SampleBytes, Skipped, Source
from .blobs import single_object
from .member_trees import MD5_ETAG, MemberTree, list_objects, modified_ns
from .tabular import TabularSource
from .tabular.files import is_table_path


class StagedTableSource(Source):
    """A TabularSource over local copies of tables at a URL (see module doc)."""

    kind = TabularSource.kind
    default_order = TabularSource.default_order
    options_class = TabularOptions

    def __init__(self, inner: TabularSource, folder: str, shown: str) -> None:
        self.inner, self.folder, self.shown = inner, folder, shown
        self.schema, self.classes = inner.schema, inner.classes

    @classmethod
    def claims(cls, src: str, source_options: Dict[str, Any]) -> bool:
        return is_table_path(src)

    @classmethod
    def open(cls, src: str, options: TabularOptions, run: RunOptions) -> "StagedTableSource":
        folder = tempfile.mkdtemp(prefix="shardkit-src-")
        try:
            local, shown = stage(src, run.storage_options, folder, run.in_flight)
            inner = TabularSource.open(local, options, run)
        except ShardkitError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise renamed(exc, folder, shown_folder(src)) from None
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        source = cls(inner, folder, shown)
        weakref.finalize(source, shutil.rmtree, folder, True)
        return source

    def _rename(self, outcome: Any) -> Any:
        return renamed_skip(outcome, self.folder, shown_folder(self.shown))

    def choose(self, plan: PlanOptions) -> None:
        self.inner.choose(plan)

    def item_sizes(self) -> np.ndarray:
        return self.inner.item_sizes()

    def estimated_bytes(self) -> int:
        return self.inner.estimated_bytes()

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int], order: Optional[np.ndarray] = None,
                    sample_bytes: Optional[SampleBytes] = None) -> List[Tuple[int, int]]:
        return self.inner.plan_ranges(max_bytes, max_items, order, sample_bytes)

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        return (self._rename(outcome) for outcome in self.inner.encode_range(start, stop))

    def fingerprint(self) -> str:
        return self.inner.fingerprint()

    def summary(self) -> Dict[str, Any]:
        return self.inner.summary()

    def plan_skipped(self) -> List[Skipped]:
        return [self._rename(item) for item in self.inner.plan_skipped()]

    def close(self) -> None:
        self.inner.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def with_labels_at(tree: MemberTree, options: ImageOptions, run: RunOptions) -> Source:
    """The image tree labelled by a labels CSV at a URL, fetched to a temporary folder for the scan."""
    from .member_source import MemberTreeSource
    assert options.labels is not None
    folder, shown = tempfile.mkdtemp(prefix="shardkit-labels-"), shown_folder(options.labels)
    try:
        stage(options.labels, run.storage_options, folder, 1)       # the folder holds the one file
        local = os.path.join(folder, os.listdir(folder)[0])
        source = MemberTreeSource.of_tree(tree, dataclasses.replace(options, labels=local), run)
    except ShardkitError as exc:
        raise renamed(exc, folder, shown) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    source.rename_skipped(folder, shown)
    return source


def shown_folder(url: str) -> str:
    """What the temporary folder stands for in messages: a table file's folder URL, or the folder URL."""
    shown = RemoteLocation(url).shown
    return shown.rsplit("/", 1)[0] if is_table_path(url) else shown.rstrip("/")


def _url_of(path: str, folder: str, shown: str) -> str:
    """A path inside the temporary folder (or relative to it) as the URL it stands for."""
    if path.startswith(folder):
        return shown + path[len(folder):]
    if os.path.exists(os.path.join(folder, path)):
        return f"{shown}/{path}"
    return path


def renamed(exc: ShardkitError, folder: str, shown: str) -> ShardkitError:
    """exc with a path inside the temporary folder replaced by the URL it stands for."""
    if isinstance(exc.path, str):
        exc.path = _url_of(exc.path, folder, shown)
    return exc


def renamed_skip(outcome: Any, folder: str, shown: str) -> Any:
    """A Skipped input inside the temporary folder named by the URL it stands for (others as they are)."""
    if isinstance(outcome, Skipped):
        return Skipped(_url_of(outcome.path, folder, shown), outcome.reason, outcome.line)
    return outcome


def stage(src: str, storage_options: Optional[Mapping[str, Any]], folder: str, in_flight: int) -> Tuple[str, str]:
    """(the local copy of the table file or folder at src, inside folder; src as it may be shown)."""
    if is_table_path(src):          # a folder of one file: names and the fingerprint never hold the folder's
        location, rel = single_object(src, storage_options)
        info = retried(location, rel, "look up", lambda: location.fs.info(location.path(rel)))
        fetch_copy(location, rel, info, os.path.join(folder, rel or "table" + os.path.splitext(src)[1]))
        return folder, location.name(rel)
    location = RemoteLocation(src, storage_options)
    root = location.root.rstrip("/") + "/"
    wanted = []
    for path, info in list_objects(location).items():
        name = safe_name(path[len(root):])[0] if path.startswith(root) else None
        if name is not None and is_table_path(name) and info.get("type") != "directory":
            wanted.append((name, info))
    if not wanted:
        raise UsageError("holds no table file (.csv, .tsv, .jsonl, .parquet, .arrow, ...)", path=location.shown)
    run_bounded(lambda pair: fetch_copy(location, pair[0], pair[1], os.path.join(folder, *pair[0].split("/"))),
                wanted, in_flight)
    return folder, location.shown


def fetch_copy(location: RemoteLocation, rel: str, info: Mapping[str, Any], target: str) -> None:
    """The object at rel copied to target once its size (and MD5, where its ETag is one) match
    the listing, with the object's modification time; retried, then one RemoteError."""
    size = int(info.get("size") or 0)
    etag = MD5_ETAG.match(str(info.get("ETag") or info.get("etag") or ""))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = temp_path(target)

    def once() -> None:
        os.close(create_new(tmp)) if not os.path.exists(tmp) else None
        location.fs.get_file(location.path(rel), str(tmp), callback=size_guard(size))
        received = os.stat(tmp).st_size
        if received != size:
            raise Mismatch(f"received {received} bytes, the listing says {size}")
        if etag and _md5_file(str(tmp)) != etag.group(1):
            raise Mismatch("its MD5 differs from the ETag the listing gave (altered on the way)")
    try:
        retried(location, rel, "fetch", once)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    mtime = modified_ns(info)           # 0 when the store gives none: then the size alone tells a change
    os.utime(target, ns=(mtime, mtime))


def _md5_file(path: str) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["StagedTableSource", "stage", "with_labels_at"]
