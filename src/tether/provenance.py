"""Where the values of a call come from: trust labels and the per-run provenance index.

The user's messages and the principal's configuration are trusted; a tool's output is
untrusted unless its manifest (or the policy) says the tool is a system of record. For every
proposed call, each argument value — and each identifier inside it (email addresses, URLs and
their domains, IBANs, account and phone numbers, file paths, ids) — is looked up in an index
of what the run has seen so far: found in trusted input, found only in the output of some
earlier call (and which one), or found nowhere. The policy then decides over those labels
(``tether.policy``), so a value an injected web page or email put in front of the model
cannot quietly decide where money, mail or data goes.

Matching is on normalised tokens, so small rewrites by the model are still recognised: case,
surrounding whitespace and punctuation, spaces inside an IBAN or a phone number, a URL's
query string and fragment, ``www.``. What is not recognised — a value spelt out in words,
encoded, split or computed — is "found nowhere", which the policy treats like untrusted for
the arguments it checks: positive trust is required, not absence of a bad match.

Everything here is pure and in memory. The index is fed by the gate at every dispatch and
rebuilt, when a process does not have it, from durable rows (the run's recorded inputs and
its effects' results), so a run resumed elsewhere knows the same. It is bounded: past
``MAX_TOKENS`` it stops learning and marks itself full, and a full index reports values it
cannot place as untrusted rather than unknown, so overflow never turns into trust.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tether.screening import redact

MAX_TOKENS = 50_000  # per run; a token is a short string, so a full index is a few MB
SHORT_VALUE = 64  # string leaves up to this length are also indexed whole
SHOWN = 80  # how much of a value a reason or an approval quotes


class Trust(StrEnum):
    """What is known of where a value came from."""

    TRUSTED = "trusted"  # in the user's input, the principal's configuration or trusted output
    UNTRUSTED = "untrusted"  # only in untrusted tool output of this run
    UNKNOWN = "unknown"  # in nothing this run has seen (made up, or transformed past matching)
    NONE = "none"  # nothing in it to check (free text without identifiers, a boolean...)


@dataclass(frozen=True, slots=True)
class Origin:
    """The call whose output a value first appeared in."""

    call_id: str
    tool: str


_EMAIL = re.compile(r"[a-z0-9._%+\-]+@[a-z0-9\-]+(?:\.[a-z0-9\-]+)*\.[a-z]{2,24}")
_URL = re.compile(r"\b[a-z][a-z0-9+.\-]*://[^\s<>\"'`\\]+")
_DOMAIN = re.compile(
    r"(?<![\w@.\-])(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9\-]{1,23}(?![\w\-])"
)
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_NUMBER = re.compile(r"(?<![\w.])\+?\d[\d \-().]{5,}\d(?![\w])")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?\b")
_PATH = re.compile(r"(?<![^\s\"'(\[=,:])(?:~|\.{1,2})?/[\w.\-]+(?:/[\w.\-]+)*/?")
_ID = re.compile(r"\b(?=[a-z_\-]*\d)(?=[\d_\-]*[a-z])[a-z0-9][a-z0-9_\-]{4,}\b")
_WORD = re.compile(r"[\w][\w'.\-]*")
_TRAILING = ".,;:!?)]}'\""


def _url_tokens(url: str) -> Iterator[str]:
    url = url.rstrip(_TRAILING)
    scheme, _, rest = url.partition("://")
    base = rest.split("#", 1)[0]
    without_query = base.split("?", 1)[0].rstrip("/")
    host = without_query.split("/", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
    if host:
        if without_query.startswith("www."):
            without_query = without_query[4:]
        yield f"{scheme}://{without_query}"
        yield from _domain_tokens(host)


def _domain_tokens(host: str) -> Iterator[str]:
    host = host.rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    yield host
    labels = host.split(".")
    if len(labels) > 2:  # the registrable part too, roughly (no public-suffix list)
        yield ".".join(labels[-2:])


def domain_of(value: str) -> str | None:
    """The host a URL (or a bare domain) names, lowercased, without ``www.``."""
    text = value.strip().lower()
    match = _URL.search(text)
    if match is not None:
        return _host(match.group(0))
    match = _DOMAIN.search(text)
    return None if match is None else next(_domain_tokens(match.group(0)))


def _host(url: str) -> str | None:
    rest = url.rstrip(_TRAILING).partition("://")[2]
    host = rest.split("#", 1)[0].split("?", 1)[0].split("/", 1)[0]
    host = host.rsplit("@", 1)[-1].split(":", 1)[0].rstrip(".")
    if not host:
        return None
    return host[4:] if host.startswith("www.") else host


def identifiers(text: str) -> list[str]:
    """The normalised identifiers in ``text``: what a consequential argument is checked by."""
    found: list[str] = []
    lowered = text.lower()
    if "@" in lowered:
        for m in _EMAIL.finditer(lowered):
            address = m.group(0).strip(".")
            found.append(address)
            found.extend(_domain_tokens(address.rsplit("@", 1)[1]))
    if "://" in lowered:
        for m in _URL.finditer(lowered):
            found.extend(_url_tokens(m.group(0)))
    if "." in lowered:
        found.extend(t for m in _DOMAIN.finditer(lowered) for t in _domain_tokens(m.group(0)))
    upper = text.upper()
    found.extend(m.group(0).replace(" ", "").lower() for m in _IBAN.finditer(upper))
    undated = _DATE.sub(" ", text) if "-" in text else text
    for m in _NUMBER.finditer(undated):
        digits = re.sub(r"\D", "", m.group(0))
        if len(digits) >= 7:
            found.append(digits)
    if "/" in lowered:
        found.extend(
            m.group(0).rstrip("/.") for m in _PATH.finditer(lowered) if len(m.group(0)) > 1
        )
    found.extend(m.group(0) for m in _ID.finditer(lowered))
    return found


def normal_value(value: Any) -> str:
    """A value as the index keys it whole: casefolded, whitespace collapsed, numbers plain."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(str(value).split()).casefold().strip(_TRAILING + " ")


def _words(text: str) -> Iterator[str]:
    for m in _WORD.finditer(text.casefold()):
        word = m.group(0).strip(_TRAILING)
        if word:
            yield word.replace(",", "")


def _leaves(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(the nearest key, the leaf) for every scalar in a JSON-like value."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, str(k))
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v, key)
    elif value is not None:
        yield key, value


class ProvenanceIndex:
    """What one run has seen: trusted tokens, and each untrusted token's first origin.

    Mutated only by the gate (``add_trusted``, ``add_output``); the planner reads it."""

    __slots__ = ("effects", "first_untrusted", "flagged", "full", "trusted", "untrusted")

    def __init__(self, trusted_values: Iterable[str] = ()) -> None:
        self.trusted: set[str] = set()
        self.untrusted: dict[str, Origin] = {}
        self.flagged: Origin | None = None  # the first output screening flagged
        self.first_untrusted: Origin | None = None  # the first untrusted output at all
        self.full = False
        self.effects = 0  # effects of the run this index has accounted for
        for value in trusted_values:
            self.add_trusted(value)

    def _room(self, n: int) -> bool:
        if len(self.trusted) + len(self.untrusted) + n > MAX_TOKENS:
            self.full = True
        return not self.full

    def add_trusted(self, value: Any) -> None:
        """Trusted input: the user's request, configuration, a system of record's output."""
        tokens: set[str] = set()
        for _, leaf in _leaves(value):
            text = leaf if isinstance(leaf, str) else normal_value(leaf)
            tokens.update(identifiers(text))
            tokens.update(_words(text))
            if len(text) <= SHORT_VALUE:
                tokens.add(normal_value(text))
        if self._room(len(tokens)):
            self.trusted |= tokens

    def add_output(
        self,
        origin: Origin,
        value: Any,
        *,
        trusted: bool = False,
        trusted_fields: frozenset[str] = frozenset(),
        flagged: bool = False,
    ) -> None:
        """A tool's (redacted) result. ``trusted_fields``: keys whose values are trusted."""
        if trusted:
            self.add_trusted(value)
            return
        if flagged and self.flagged is None:
            self.flagged = origin
        if self.first_untrusted is None:
            self.first_untrusted = origin
        tokens: list[str] = []
        for key, leaf in _leaves(value):
            if key in trusted_fields:
                self.add_trusted(leaf)
                continue
            text = leaf if isinstance(leaf, str) else normal_value(leaf)
            tokens.extend(identifiers(text))
            if len(text) <= SHORT_VALUE:
                tokens.append(normal_value(text))
        if not self._room(len(tokens)):
            return
        untrusted = self.untrusted
        for token in tokens:
            if token not in untrusted:
                untrusted[token] = origin

    def place(self, token: str) -> tuple[Trust, Origin | None]:
        if token in self.trusted:
            return Trust.TRUSTED, None
        origin = self.untrusted.get(token)
        if origin is not None:
            return Trust.UNTRUSTED, origin
        return (Trust.UNTRUSTED if self.full else Trust.UNKNOWN), None


class Check(StrEnum):
    """What of an argument the policy checks."""

    IDENTIFIERS = "identifiers"  # the identifiers inside it (the default)
    TRUSTED = "trusted"  # the whole value: it must appear in trusted input
    ANY = "any"  # nothing: content the user expects to come from data


@dataclass(frozen=True, slots=True)
class ArgumentProvenance:
    """Where one argument's value came from, as a policy reason and an approval show it."""

    argument: str
    trust: Trust
    value: Any  # the argument, masked as approvals mask it, cut to ``SHOWN`` characters
    token: str | None  # the identifier (or value) that decided, if not the whole value
    origin: Origin | None

    @property
    def trusted(self) -> bool:
        return self.trust in (Trust.TRUSTED, Trust.NONE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "argument": self.argument,
            "value": self.value,
            "trusted": self.trusted,
            "trust": self.trust.value,
            "identifier": self.token,
            "call_id": None if self.origin is None else self.origin.call_id,
            "tool": None if self.origin is None else self.origin.tool,
        }

    def describe(self) -> str:
        """One line for a reason or an approval: which value, from where."""
        what = f"argument '{self.argument}'"
        if self.token is not None:
            what += f" ({_quote(self.token)})"
        if self.trust is Trust.UNTRUSTED and self.origin is not None:
            return (
                f"{what} first appeared in the output of `{self.origin.tool}` call "
                f"{self.origin.call_id}; not in the user's request"
            )
        if self.trust is Trust.UNTRUSTED:
            return f"{what} could not be placed (the run's provenance index is full)"
        if self.trust is Trust.UNKNOWN:
            return f"{what} appears in no trusted input (not in the user's request)"
        return f"{what} is {self.trust.value}"


def _quote(token: str) -> str:
    shown = token if len(token) <= SHOWN else token[: SHOWN - 1] + "…"
    return repr(redact(shown)[0])


_RANK = {Trust.NONE: 0, Trust.TRUSTED: 1, Trust.UNKNOWN: 2, Trust.UNTRUSTED: 3}


def label_argument(
    index: ProvenanceIndex, name: str, value: Any, check: Check, sensitive: bool
) -> ArgumentProvenance:
    """The label of one argument: the worst of its identifiers (or its whole value)."""
    shown = _shown(value, sensitive)
    if check is Check.ANY:
        return ArgumentProvenance(
            argument=name, trust=Trust.NONE, value=shown, token=None, origin=None
        )
    worst: tuple[Trust, str | None, Origin | None] = (Trust.NONE, None, None)
    seen = False
    for _, leaf in _leaves(value):
        if not isinstance(leaf, str):
            continue
        for found in identifiers(leaf):
            seen = True
            trust, origin = index.place(found)
            if _RANK[trust] > _RANK[worst[0]]:
                worst = (trust, None if sensitive else found, origin)
    if check is Check.TRUSTED and not seen and not isinstance(value, Mapping | list | tuple):
        # No identifier in it (a name, an amount): the value itself must be trusted input,
        # whole or word by word.
        whole = normal_value(value)
        trust, origin = index.place(whole)
        if trust is not Trust.TRUSTED and all(w in index.trusted for w in _words(whole)):
            trust, origin = Trust.TRUSTED, None
        worst = (trust, None, origin)
    trust, token, origin = worst
    return ArgumentProvenance(argument=name, trust=trust, value=shown, token=token, origin=origin)


def _shown(value: Any, sensitive: bool) -> Any:
    from tether.approvals import mask_value  # approvals -> identity -> policy -> here

    if sensitive:
        return "[REDACTED]"
    masked = mask_value(value)[0]
    if isinstance(masked, str) and len(masked) > SHOWN:
        return masked[: SHOWN - 1] + "…"
    return masked


def egress_label(
    index: ProvenanceIndex, name: str, value: Any, allowed: frozenset[str]
) -> ArgumentProvenance:
    """An egress argument (a URL to fetch): where its domain came from. A domain on the
    allow-list (or under one) counts as trusted configuration."""
    shown = _shown(value, False)
    host = domain_of(value) if isinstance(value, str) else None
    if host is None:
        return ArgumentProvenance(
            argument=name, trust=Trust.NONE, value=shown, token=None, origin=None
        )
    if _allowed(host, allowed):
        return ArgumentProvenance(
            argument=name, trust=Trust.TRUSTED, value=shown, token=host, origin=None
        )
    # Only the exact host is trusted: a subdomain of a trusted domain may be anyone's
    # (pages on a shared host), so trust does not flow down from the registrable part.
    trust, origin = index.place(host)
    if trust is Trust.UNKNOWN:
        found, found_origin = index.place(".".join(host.split(".")[-2:]))
        if found is Trust.UNTRUSTED:
            trust, origin = found, found_origin
    return ArgumentProvenance(argument=name, trust=trust, value=shown, token=host, origin=origin)


def _allowed(host: str, allowed: frozenset[str]) -> bool:
    if host in allowed:
        return True
    return any(host.endswith("." + domain) for domain in allowed)
