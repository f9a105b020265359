"""Where a value points: one reading of addresses, links and host names, shared by the
provenance index, the argument checks and egress, so the three can never disagree.

Text is folded first (``fold``): NFKC (a fullwidth at sign or letter becomes the plain one it
stands for), percent-escapes decoded (``%40``), and the targets of markdown and HTML links
set apart as words of their own. Then:

- an e-mail address is delivered to the host after its *last* at sign, whatever comes before
  (a quoted local part, another address);
- a link is ``scheme://userinfo@host:port/path?query``; the scheme may be missing
  (``//host/…`` or ``host/…``), the userinfo is dropped (``trusted.com@evil.com`` goes to
  evil.com) and so are the port, the fragment and ``www.``; links are keyed without their
  scheme, so ``http``, ``https`` and none name the same place;
- a bare name counts as a host only if it ends in a public suffix (the list shipped by the
  ``publicsuffixlist`` package), so ``done.Thanks`` is not a domain; its registrable part
  (``example.co.uk``) is a token too;
- a host in another script is IDNA-encoded (``xn--…``), so a homoglyph of a trusted domain is
  a different, unknown host; a word that looks like a destination but cannot be read at all
  stays a token of its own, which nothing trusted matches.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote

_LINK_TARGET = re.compile(r"\]\(|\b(?:href|src|action)\s*=\s*[\"']?", re.IGNORECASE)
_HOST = re.compile(r"(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9\-]{1,62}")
_LOCAL = re.compile(r"[a-z0-9._%+\-\"]+")
STRIP = "\"'`()[]{}<>,;:!?.*"  # around a word, never part of where it points


def fold(text: str) -> str:
    """Text as the scanner reads it (see the module docstring)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    if "%" in text:
        text = unquote(text)
    if "](" in text or "=" in text:
        text = _LINK_TARGET.sub(" ", text)
    return text


@lru_cache(maxsize=1)
def _suffixes() -> object:
    from publicsuffixlist import PublicSuffixList  # ships its data: nothing is fetched

    return PublicSuffixList()


@lru_cache(maxsize=8192)
def registrable(host: str) -> str | None:
    """The registrable domain of ``host`` (``a.b.example.co.uk`` -> ``example.co.uk``), or
    None if it does not end in a known public suffix."""
    psl = _suffixes()
    return psl.privatesuffix(host, accept_unknown=False)  # type: ignore[attr-defined, no-any-return]


def _ascii_host(host: str) -> str | None:
    host = host.strip(".").lower()
    if host.startswith("www."):
        host = host[4:]
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return host if _HOST.fullmatch(host) else None


def host_tokens(host: str) -> tuple[str, ...]:
    """A host and, if shorter, its registrable domain."""
    base = registrable(host)
    return (host,) if base is None or base == host else (host, base)


@dataclass(frozen=True, slots=True)
class Link:
    """Where a link points: host, path (no trailing slash) and query."""

    host: str
    path: str
    query: str

    @property
    def token(self) -> str:
        """The destination: the same whatever the scheme and the query."""
        return f"//{self.host}{self.path}"

    @property
    def as_given(self) -> str:
        """The link exactly as followed: query and all."""
        return f"//{self.host}{self.path}?{self.query}" if self.query else self.token


def parse_link(word: str) -> Link | None:
    """``word`` (folded, lowercased, stripped) as a link: with a scheme, scheme-relative, or
    a bare ``host/path`` whose host ends in a public suffix. None if it is not one."""
    scheme, sep, rest = word.partition("://")
    if sep:
        if not scheme or not scheme[0].isalpha():
            return None
        bare = False
    elif word.startswith("//"):
        rest, bare = word[2:], False
    else:
        rest, bare = word, True
    cut = len(rest)
    for mark in "/?#":
        at = rest.find(mark)
        if at != -1 and at < cut:
            cut = at
    authority, tail = rest[:cut], rest[cut:]
    if bare and not tail.startswith("/"):
        return None  # a bare name alone is a host (see ``hosts``), not a link
    host = _ascii_host(authority.rsplit("@", 1)[-1].split(":", 1)[0])
    if host is None or (bare and registrable(host) is None):
        return None
    tail = tail.split("#", 1)[0]
    path, _, query = tail.partition("?")
    return Link(host, path.rstrip("/"), query)


def parse_address(word: str) -> tuple[str, str] | None:
    """``word`` (folded, lowercased, stripped) as an e-mail address: the address as a token,
    and the host it is delivered to (after the last at sign). None if it is not one."""
    local, sep, domain = word.rpartition("@")
    if not sep or not local:
        return None
    domain = domain.split("/", 1)[0].split("?", 1)[0].rstrip(STRIP)
    host = _ascii_host(domain)
    if host is None or not _LOCAL.fullmatch(local.replace("@", "")):
        return None
    return f"{local}@{host}", host


def parse_host(word: str) -> str | None:
    """``word`` as a bare host name ending in a public suffix, or None."""
    host = _ascii_host(word)
    return host if host is not None and registrable(host) is not None else None


def looks_like_destination(word: str) -> bool:
    """Whether a word that none of the parsers could read still looks like it names a
    place: an at sign before a dot, a ``//``, or a dotted name in another script. Such a word
    is checked as a token of its own (unknown unless seen), never skipped."""
    if "@" in word and "." in word.rsplit("@", 1)[1].strip("."):
        return True
    if "//" in word:
        return True
    return not word.isascii() and "." in word.strip(".") and any(c.isalpha() for c in word)


@lru_cache(maxsize=8192)
def destination(value: str) -> str | None:
    """The host a whole value sends to, if the value is a link or a host name (with or
    without a scheme): what egress checks. None if it names no place."""
    word = fold(value).strip().lower().strip(STRIP)
    if not word or any(c.isspace() for c in word):
        return None
    if "@" in word and "://" not in word and "/" not in word.split("@", 1)[0]:
        address = parse_address(word)
        return None if address is None else address[1]
    link = parse_link(word)
    if link is not None:
        return link.host
    return parse_host(word)
