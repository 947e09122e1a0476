"""Where a dataset lies in object storage: its URL, the fsspec file system behind it, and what of
it may be shown. Credentials come from the store's usual places (environment, config files,
instance roles) or storage_options, or from the URL itself (s3://KEY:SECRET@bucket, http://USER:PASS@host);
every message names the URL with them taken out, and scrub() removes them from a library's text."""
from __future__ import annotations

import base64
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import SplitResult, unquote, urlsplit

from ..errors import UsageError

#: Option names whose values are credentials (matched as parts of the name, any case).
SECRET_WORDS = ("secret", "token", "password", "passwd", "key", "credential", "auth", "session", "signature")
#: Environment variables of the stores that hold credentials, scrubbed from library messages too.
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS")
#: Shorter values are not scrubbed (they would mangle ordinary words); no real credential is this short.
_MIN_SECRET = 4
_INSTALL = "pip install 'shardkit[remote]'"


def is_url(text: str) -> bool:
    """Whether text names a place through fsspec (PROTOCOL://...) rather than a local path."""
    return "://" in text


class RemoteLocation:
    """A folder of objects: the dataset at a URL. fs and root are made on first use in each
    process (fsspec's file systems hold event loops and sockets that never cross a fork); the
    object pickles with its URL and options."""

    def __init__(self, url: str, storage_options: Optional[Mapping[str, Any]] = None) -> None:
        self.given = url
        self.url, self.options, url_secrets = _split_credentials(url, dict(storage_options or {}))
        self.shown = redact_url(url)
        self.secrets = tuple(sorted({s for s in url_secrets + _option_secrets(self.options) + _env_secrets()
                                     if len(s) >= _MIN_SECRET}, key=len, reverse=True))
        self._opened: Optional[Tuple[int, Any, str]] = None

    @property
    def fs(self) -> Any:
        """The fsspec file system (opened in this process)."""
        return self._open()[0]

    @property
    def root(self) -> str:
        """The dataset's folder as fs names it (no protocol)."""
        return self._open()[1]

    def path(self, rel: str) -> str:
        """fs's name of the object at rel (a '/'-separated path inside the dataset)."""
        return self.root.rstrip("/") + "/" + rel

    def name(self, rel: str) -> str:
        """The object's URL as it may be shown (no credentials)."""
        return self.shown.rstrip("/") + "/" + rel

    def is_local(self) -> bool:
        """Whether the URL names a local folder (a plain path or file://), where folders must exist."""
        protocols = self.fs.protocol
        return bool({"file", "local"} & set([protocols] if isinstance(protocols, str) else protocols))

    def scrub(self, text: str) -> str:
        """text with every credential this location knows of replaced by ***."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def _open(self) -> Tuple[Any, str]:
        if self._opened is None or self._opened[0] != os.getpid():
            fs, root = _filesystem(self.url, self.options, self.shown, self.scrub)
            self._opened = (os.getpid(), fs, root)
        return self._opened[1], self._opened[2]

    def __reduce__(self) -> Any:
        return (RemoteLocation, (self.given, self.options))

    def __repr__(self) -> str:
        return f"RemoteLocation({self.shown!r})"


def redact_url(url: str) -> str:
    """url with its user and password taken out and its query's values (signed URLs) hidden."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = "&".join(pair.split("=", 1)[0] + "=***" if "=" in pair else pair
                     for pair in parts.query.split("&")) if parts.query else ""
    return SplitResult(parts.scheme, netloc, parts.path, query, "").geturl()


def _split_credentials(url: str, options: Dict[str, Any]) -> Tuple[str, Dict[str, Any], List[str]]:
    """(url without user:password@, options with them as the store's own options, the secrets)."""
    if not is_url(url):
        return url, options, []
    parts = urlsplit(url)
    query_secrets = [value for pair in parts.query.split("&") for value in pair.split("=", 1)[1:]]
    if "@" not in parts.netloc:
        return url, options, query_secrets
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    user, password = unquote(user), unquote(password)
    scheme = parts.scheme.lower()
    if scheme in ("s3", "s3a"):
        options.setdefault("key", user)
        options.setdefault("secret", password)
    elif scheme in ("http", "https"):
        client = dict(options.get("client_kwargs") or {})
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        client["headers"] = {"Authorization": f"Basic {token}", **dict(client.get("headers") or {})}
        options["client_kwargs"] = client
    else:
        raise UsageError(f"credentials in a {scheme}:// URL are not understood; give them in storage_options or "
                         "the store's usual configuration", path=redact_url(url))
    bare = SplitResult(parts.scheme, host, parts.path, parts.query, parts.fragment).geturl()
    return bare, options, [user, password, userinfo] + query_secrets


def _option_secrets(options: Mapping[str, Any]) -> List[str]:
    """The string values under credential-like names in options, nested dicts included."""
    found: List[str] = []
    for name, value in options.items():
        if isinstance(value, Mapping):
            found.extend(_option_secrets(value))
        elif any(word in str(name).lower() for word in SECRET_WORDS):
            if isinstance(value, str):
                found.extend([value, *value.split()])     # "Basic <token>": the token alone too
            elif hasattr(value, "password"):        # aiohttp.BasicAuth
                found.extend(str(part) for part in (value.login, value.password))
    return found


def _env_secrets() -> List[str]:
    return [os.environ[name] for name in SECRET_ENV if os.environ.get(name)]


def _filesystem(url: str, options: Dict[str, Any], shown: str, scrub: Any) -> Tuple[Any, str]:
    """fsspec's file system and path for url; UsageError naming what to install when the extra is missing."""
    try:
        import fsspec.core
    except ImportError:
        raise UsageError(f"object storage needs the remote extra: {_INSTALL}", path=shown) from None
    try:
        fs, root = fsspec.core.url_to_fs(url, **_with_timeouts(url, options))
    except ImportError as exc:
        raise UsageError(f"this URL needs a package that is not installed ({scrub(str(exc))}): {_INSTALL}",
                         path=shown) from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"cannot use this URL ({scrub(str(exc))})", path=shown) from None
    return fs, root


#: Seconds an HTTP read may wait for the next bytes before the attempt fails (and is retried):
#: a stalled server must end in an error, never in a hang.
HTTP_READ_TIMEOUT = 60.0
HTTP_CONNECT_TIMEOUT = 30.0


def _with_timeouts(url: str, options: Dict[str, Any]) -> Dict[str, Any]:
    """options with read and connect timeouts for http(s) unless the caller gave its own."""
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        return options
    client = dict(options.get("client_kwargs") or {})
    if "timeout" not in client:
        import aiohttp
        client["timeout"] = aiohttp.ClientTimeout(total=None, sock_connect=HTTP_CONNECT_TIMEOUT,
                                                  sock_read=HTTP_READ_TIMEOUT)
    return {**options, "client_kwargs": client}
