"""Store URLs: which backend a URL names, read with ``urllib.parse``, and refused with advice
when it is malformed.

    sqlite:///tether.db           a file relative to the working directory
    sqlite:////var/lib/tether.db  an absolute path (the fourth slash is the path's own)
    sqlite:///:memory:            an SQLite database in memory
    tether.db                     a bare path ending .db, .sqlite or .sqlite3
    postgresql://user@host/db     PostgreSQL (also postgres://); see tether.store.postgres
    memory://                     the in-memory reference store

A SQLite path is taken as written, not percent-decoded, so that a file name with ``%`` in it
opens the file it names, as it always has.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import SplitResult, parse_qsl, urlsplit

from tether.errors import ConfigurationError

EXAMPLES = "sqlite:///path/to/tether.db, postgresql://user@host/db or memory://"
SQLITE_PARAMETERS = ("synchronous", "busy_timeout")
BARE_SQLITE = (".db", ".sqlite", ".sqlite3")

Kind = Literal["memory", "sqlite", "postgresql"]


def store_kind(url: str) -> Kind:
    """Which backend ``url`` names; a clear error if none does or it is malformed."""
    scheme = _split(url).scheme.lower()
    after = url[len(scheme) + 1 :] if scheme else url
    if scheme == "memory":
        if after not in ("", "//"):
            raise ConfigurationError(
                f"the memory store takes no name or options, so {url!r} would not name a "
                "shared store; write memory://"
            )
        return "memory"
    if scheme == "sqlite" or (not scheme and url.endswith(BARE_SQLITE)):
        sqlite_url(url)  # refuse a malformed one before anything opens it
        return "sqlite"
    if scheme in ("postgresql", "postgres"):
        if not after.startswith("//"):
            raise ConfigurationError(
                f"malformed PostgreSQL URL {redact(url)!r}: write "
                f"{scheme}://user@host:5432/dbname (or {scheme}:///dbname for the local socket)"
            )
        return "postgresql"
    raise ConfigurationError(f"no store for URL {redact(url)!r}; use {EXAMPLES}")


def sqlite_url(url: str) -> tuple[str, dict[str, str]]:
    """The file a SQLite URL names and its parameters (``synchronous``, ``busy_timeout``).
    A bare path is taken whole. Anything else starting ``sqlite:`` but not ``sqlite:///`` is
    refused rather than guessed at: ``sqlite:/x.db`` would otherwise make a folder named
    ``sqlite:``, and ``sqlite://x.db`` reads as a host named ``x.db``."""
    parts = _split(url)
    if parts.scheme.lower() != "sqlite":
        return url, {}
    if not url[len("sqlite:") :].startswith("//") or parts.netloc:
        raise ConfigurationError(_malformed(url))
    path = parts.path[1:]  # the slash that ends "sqlite://"; a fourth one is the path's own
    if not path:
        raise ConfigurationError(f"no file in SQLite URL {url!r}; use sqlite:///path/to/tether.db")
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(params) - set(SQLITE_PARAMETERS))
    if unknown:
        raise ConfigurationError(
            f"unknown parameter {unknown[0]!r} in SQLite URL {url!r}; a SQLite URL takes "
            f"{' and '.join(SQLITE_PARAMETERS)}, as in sqlite:///{path}?synchronous=normal"
        )
    return path, params


def _split(url: str) -> SplitResult:
    try:
        # No fragments: a "#" in a file name is part of the name.
        return urlsplit(url, allow_fragments=False)
    except ValueError as e:  # an unbalanced "[" in the host, say
        raise ConfigurationError(
            f"malformed store URL {redact(url)!r} ({e}); use {EXAMPLES}"
        ) from None


def _malformed(url: str) -> str:
    given = url[len("sqlite:") :].split("?", 1)[0]
    name = given.lstrip("/") or "path/to/tether.db"
    if given.startswith("//"):
        return (
            f"SQLite URL {url!r} is ambiguous: write sqlite:////{name} for /{name}, or "
            f"sqlite:///{name} for {name} relative to the working directory"
        )
    if given.startswith("/"):
        return (
            f"malformed SQLite URL {url!r}: an absolute path takes four slashes, sqlite:////{name}"
        )
    return (
        f"malformed SQLite URL {url!r}: write sqlite:///{name} for a path relative to the "
        "working directory, or sqlite:////abs/path.db for an absolute one"
    )


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return url.partition("://")[0] + "://..."
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()
