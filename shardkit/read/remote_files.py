"""A dataset at a URL (s3://, gs://, http(s)://): its manifest, fetched and checked, and the local
cache its shards are read through (remote/cache.py); a local dataset needs neither."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

from ..errors import UsageError
from ..remote.cache import RemoteShardCache
from ..remote.location import is_url, redact_url

#: The keywords that apply to a dataset at a URL only.
REMOTE_OPTIONS = ("cache_dir", "cache_limit", "storage_options")


def remote_files(root: "str | os.PathLike[str]", cache_dir: "str | os.PathLike[str] | None",
                 cache_limit: Union[int, str, None], storage_options: Optional[Mapping[str, Any]]
                 ) -> Optional[RemoteShardCache]:
    """The cache of the dataset at root when root is a URL (cache_dir required), else None;
    UsageError for remote options given with a local path."""
    given = {name for name, value in zip(REMOTE_OPTIONS, (cache_dir, cache_limit, storage_options))
             if value is not None}
    if not is_url(os.fspath(root)):
        if given:
            raise UsageError(f"{', '.join(sorted(given))} apply to a dataset at a URL (s3://, gs://, "
                             "http(s)://) only", path=os.fspath(root))
        return None
    if cache_dir is None:
        raise UsageError("a dataset at a URL is read through a local cache of its shards: give "
                         "cache_dir=FOLDER (and cache_limit=SIZE, by default the whole dataset)",
                         path=redact_url(os.fspath(root)))
    return RemoteShardCache.at(os.fspath(root), os.fspath(cache_dir), cache_limit, storage_options=storage_options)
