"""Egress: where an open-world call sends what it carries (a link to fetch, an upload
address), judged by the host it names — on the allow-list, trusted, or a link the run was
given and may follow (per host, on the run's links budget)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from tether.policy.destinations import STRIP, fold, host_tokens, looks_like_destination, parse_link
from tether.policy.provenance import (
    SHOWN,
    ArgumentProvenance,
    ProvenanceIndex,
    Trust,
    domain_of,
)


def egress_label(
    index: ProvenanceIndex,
    name: str,
    value: Any,
    allowed: frozenset[str],
    *,
    follow: frozenset[str] = frozenset(),
    links_left: int = 0,
) -> ArgumentProvenance:
    """An egress argument (a link to fetch, an address to send to): where its host came
    from. A host on the allow-list (or under one) counts as trusted configuration.
    ``follow``: hosts (``*`` any) whose links, seen verbatim in the run — path and query
    exactly as given — may be fetched even from untrusted output, while ``links_left`` of the
    run's links budget remain: the request then carries nothing but the link itself."""
    host = domain_of(value) if isinstance(value, str) else None
    if host is None:
        if isinstance(value, str) and looks_like_destination(fold(value).lower()):
            return ArgumentProvenance(
                argument=name, trust=Trust.UNKNOWN, raw=value, token=value[:SHOWN], origin=None
            )
        return ArgumentProvenance(
            argument=name, trust=Trust.NONE, raw=value, token=None, origin=None
        )
    link = _verbatim(value) if isinstance(value, str) else None
    requested = host in index.requested or (
        link is not None and link.split("?", 1)[0] in index.requested
    )
    if _allowed(host, allowed):
        return ArgumentProvenance(
            argument=name, trust=Trust.TRUSTED, raw=value, token=host, origin=None
        )
    if (
        follow
        and links_left > 0
        and _follows(host, follow)
        and link is not None
        and (link in index.trusted or link in index.untrusted)
    ):
        return ArgumentProvenance(
            argument=name,
            trust=Trust.TRUSTED,
            raw=value,
            token=link,
            origin=None,
            followed=True,
        )
    # Only the exact host is trusted: a subdomain of a trusted domain may be anyone's
    # (pages on a shared host), so trust does not flow down from the registrable part.
    trust, origin = index.place(host)
    if trust is Trust.UNKNOWN:
        for token in reversed(host_tokens(host)):
            found, found_origin = index.place(token)
            if found is Trust.UNTRUSTED:
                trust, origin = found, found_origin
                break
    return ArgumentProvenance(
        argument=name, trust=trust, raw=value, token=host, origin=origin, requested=requested
    )


@lru_cache(maxsize=4096)
def _verbatim(url: str) -> str | None:
    """A link as the index keys one seen whole (query kept; scheme, fragment, www. not)."""
    link = parse_link(fold(url).strip().lower().strip(STRIP))
    return None if link is None else link.as_given


def _follows(host: str, follow: frozenset[str]) -> bool:
    return "*" in follow or _allowed(host, follow)


def _allowed(host: str, allowed: frozenset[str]) -> bool:
    if host in allowed:
        return True
    return any(host.endswith("." + domain) for domain in allowed)
