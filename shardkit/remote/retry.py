"""Calls to object storage, retried with back-off on transient errors; a failure that stays ends in
one RemoteError naming the object's URL (without credentials) and what went wrong."""
from __future__ import annotations

import os
import random
import time
from typing import Any, Callable, Optional, TypeVar

from ..errors import RemoteError, ShardkitError
from .location import RemoteLocation

T = TypeVar("T")

#: Tries of one call in all (the stores' own clients retry some errors below this too).
ATTEMPTS = 4
#: Seconds before the second try; doubled before each next one, with jitter. $SHARDKIT_RETRY_DELAY
#: sets it (the fault tests shorten it).
BASE_DELAY = 0.5
#: Library messages are cut to this many characters (a server may answer with a whole page).
_DETAIL_CHARS = 300


class Mismatch(ValueError):
    """What arrived is not what the manifest says (size or sha256): worth another try, since a
    connection that broke or a proxy that mangled once may not do so again."""


def retried(location: RemoteLocation, rel: str, action: str, call: Callable[[], T]) -> T:
    """call(), tried up to ATTEMPTS times while it fails transiently; RemoteError('<url>: cannot
    <action>: <detail>') once it fails for good."""
    delay = float(os.environ.get("SHARDKIT_RETRY_DELAY", BASE_DELAY))
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except (KeyboardInterrupt, SystemExit, MemoryError):
            raise
        except ShardkitError:
            raise
        except BaseException as raised:
            exc = unwrap(raised)
            if permanent(exc) or attempt == ATTEMPTS:
                tries = f" (tried {attempt} times)" if attempt > 1 else ""
                raise RemoteError(f"cannot {action}: {describe(exc, location)}{tries}",
                                  url=location.name(rel)) from None
            time.sleep(delay * 2 ** (attempt - 1) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def unwrap(exc: BaseException) -> BaseException:
    """The error that happened: fsspec's HTTP file system reports any failure to look an object up
    (a refused connection, a timeout, a 5xx) as FileNotFoundError, with the real error as its cause
    (a store's own "no such key" stays what it is)."""
    cause = exc.__cause__
    if not isinstance(exc, FileNotFoundError) or cause is None or isinstance(cause, FileNotFoundError):
        return exc
    status = getattr(cause, "status", None)
    network = isinstance(cause, (OSError, TimeoutError)) and status is None
    return cause if network or (isinstance(status, int) and status != 404) else exc


def permanent(exc: BaseException) -> bool:
    """Errors another try cannot mend: a missing object, denied access, a 4xx answer (but 408
    Request Timeout and 429 Too Many Requests)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return True
    status = getattr(exc, "status", None)
    return isinstance(status, int) and 400 <= status < 500 and status not in (408, 429)


def describe(exc: BaseException, location: RemoteLocation) -> str:
    """What went wrong, in a few words, with no credential in it."""
    if isinstance(exc, FileNotFoundError):
        return "no such object"
    if isinstance(exc, PermissionError):
        return "access denied (check the credentials the store is given)"
    if isinstance(exc, Mismatch):
        return str(exc)
    text = " ".join(location.scrub(str(exc)).split())
    if len(text) > _DETAIL_CHARS:
        text = text[:_DETAIL_CHARS] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def fetch_bytes(location: RemoteLocation, rel: str, limit: int) -> bytes:
    """The whole object at rel (at most limit bytes: a larger one is refused before it is read)."""
    data = _fetch(location, rel, limit, missing_ok=False)
    assert data is not None
    return data


def fetch_if_present(location: RemoteLocation, rel: str, limit: int) -> Optional[bytes]:
    """fetch_bytes, or None when the store says there is no such object."""
    return _fetch(location, rel, limit, missing_ok=True)


def _fetch(location: RemoteLocation, rel: str, limit: int, missing_ok: bool) -> Optional[bytes]:
    def read() -> Optional[bytes]:
        try:
            size = location.fs.size(location.path(rel))
        except FileNotFoundError as exc:
            if missing_ok and unwrap(exc) is exc:
                return None
            raise
        if size is not None and size > limit:
            raise ValueError(f"the object has {size} bytes, more than the {limit} accepted")
        data: bytes = location.fs.cat_file(location.path(rel))
        if len(data) > limit:
            raise ValueError(f"the object has {len(data)} bytes, more than the {limit} accepted")
        return data
    return retried(location, rel, "fetch", read)


def any_error(call: Callable[[], Any]) -> Any:
    """call()'s result, or None if it raised (best-effort clean-up of objects nobody lists any more)."""
    try:
        return call()
    except Exception:
        return None
