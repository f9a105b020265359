"""Where the values of a call come from: trust labels and the per-run provenance index.

The user's messages and the principal's configuration are trusted; a tool's output is
untrusted unless its manifest (or the policy) says the tool is a system of record. For every
proposed call, each argument value — and each identifier inside it (email addresses, URLs and
their domains, IBANs, account and phone numbers, file paths, ids) — is looked up in an index
of what the run has seen so far: found in trusted input, found only in the output of some
earlier call (and which one), or found nowhere. The policy then decides over those labels
(``tether.policy.rules``), so a value an injected web page or email put in front of the model
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

The module is long because labelling where an argument came from covers every kind of value it
recognises (identifiers, URLs, addresses, paths) and they share one index.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import unquote

from tether.core.screening import redact

MAX_TOKENS = 20_000  # per run; a token is a short string, so a full index is a few MB
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
_WORD = re.compile(r"\w(?:[\w'.\-]|,(?=\d{3}))*")  # "1,000" is one word
_TRAILING = ".,;:!?)]}'\""


def _url_tokens(url: str, *, as_given: bool = True) -> Iterator[str]:
    """The URL without query and fragment, then (``as_given``, for the index) the link as
    given if that differs, then its host and registrable domain."""
    url = url.rstrip(_TRAILING)
    scheme, _, rest = url.partition("://")
    base = rest.split("#", 1)[0]
    without_query = base.split("?", 1)[0].rstrip("/")
    host = without_query.split("/", 1)[0].rsplit("@", 1)[-1].split(":", 1)[0]
    if host:
        if without_query.startswith("www."):
            without_query = without_query[4:]
            base = base[4:]
        yield f"{scheme}://{without_query}"
        if as_given and base.rstrip("/") != without_query:  # query and all
            yield f"{scheme}://{base.rstrip('/')}"
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


_LINK_TARGET = re.compile(r"\]\(|\b(?:href|src|action)\s*=\s*[\"']?", re.IGNORECASE)


def fold(text: str) -> str:
    """Text as the scanner reads it: NFKC-folded (a fullwidth at sign or letter becomes the
    plain one it stands for), percent-escapes decoded (``%40``), and the targets of markdown
    and HTML links set apart as words of their own (``](…)``, ``href="…"``). Both the index
    and the checks read text folded, so the user's own address matches however it is
    written, and an obfuscated one is read for what it is."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    if "%" in text:
        text = unquote(text)
    if "](" in text or "=" in text:
        text = _LINK_TARGET.sub(" ", text)
    return text


def unplaced(text: str) -> str | None:
    """A word of ``text`` that looks like a destination (an address, a link, a dotted name
    in another script) but that no pattern could place, or None. The checks treat it as
    ``unknown``: what cannot be read cannot be trusted."""
    for raw in fold(text).lower().split():
        word = raw.strip(_STRIP)
        if "@" in word and "." in word.rsplit("@", 1)[1].strip("."):
            return word
        if "//" in word:
            return word
        if not word.isascii() and "." in word.strip(".") and any(c.isalpha() for c in word):
            return word
    return None


def links(text: str) -> list[str]:
    """The identifiers in ``text`` that say where something goes: email addresses, URLs and
    domains (normalised as ``identifiers`` gives them)."""
    return _scan(fold(text), every_kind=False, as_given=False)


def identifiers(text: str, *, as_given: bool = False) -> list[str]:
    """The normalised identifiers in ``text``: what a consequential argument is checked by.
    A URL is identified by where it points (scheme, host, path): another query string is the
    same destination. ``as_given``: also each URL as written, query and all, which the index
    keeps so that a link followed verbatim can be recognised (``follow_links``)."""
    return _scan(fold(text), every_kind=True, as_given=as_given)


# Python's regular expressions have no literal to skip ahead with for most of these, so a
# pattern run over a whole text tries every position: microseconds per pattern per hundred
# characters. The text is split into words once instead (in C), and each word is tested
# with the cheap checks first; only IBANs and phone numbers, which hold spaces, are
# searched for in the whole text, and only when it has enough digits to contain one.
_STRIP = "\"'`()[]{}<>,;:!?.*"
_DOMAIN_WORD = re.compile(r"(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9\-]{1,23}")
_ID_WORD = re.compile(r"(?=[a-z_\-]*\d)(?=[\d_\-]*[a-z])[a-z0-9][a-z0-9_\-]{4,}")
_NOT_DIGIT = re.compile(r"\D")
_PHONE_CHARS = "+-().0123456789"
_IBAN_WORD = re.compile(r"[a-z]{2}\d{2}[a-z0-9]{8,30}")


def _scan(text: str, *, every_kind: bool, as_given: bool) -> list[str]:
    found: list[str] = []
    spaced_iban = phone = False
    run = 0  # digits in the current run of number-like words ("+1 (555) 123-4567")
    for raw in text.lower().split():
        if raw.isalpha():  # most words: letters only, nothing to find, no number run
            run = 0
            continue
        word = raw.strip(_STRIP)
        if every_kind:
            if word and not word.strip(_PHONE_CHARS):
                run += len(word) - sum(map(word.count, "+-()."))
                phone = phone or run >= 7
            else:
                run = 0
        if len(word) < 4 or word.isalpha():  # most words: nothing to find in them
            continue
        if word.startswith("//"):  # scheme-relative: where it goes is the same
            word = "https:" + word
        if "@" in word:
            for m in _EMAIL.finditer(word):
                address = m.group(0).strip(".")
                found.append(address)
                found.extend(_domain_tokens(address.rsplit("@", 1)[1]))
            continue
        if "://" in word:
            match = _URL.search(word)
            if match is not None:
                found.extend(_url_tokens(match.group(0), as_given=as_given))
            continue
        head = word
        if "/" in word:
            if word[0] in "/~.":
                if every_kind:
                    found.append(word.rstrip("/."))
                continue
            head = word.split("/", 1)[0]  # evil.com/path
        if "." in head and _DOMAIN_WORD.fullmatch(head):
            found.extend(_domain_tokens(head))
        elif every_kind and not word.isdigit():
            if word[:2].isalpha() and word[2:4].isdigit():  # an IBAN, whole or its first group
                if len(word) == 4:
                    spaced_iban = True
                elif _IBAN_WORD.fullmatch(word):
                    found.append(word)
                    continue
            if _ID_WORD.fullmatch(word) is not None:
                found.append(word)
    if spaced_iban:
        found.extend(m.group(0).replace(" ", "").lower() for m in _IBAN.finditer(text.upper()))
    if phone:
        undated = _DATE.sub(" ", text) if "-" in text else text
        for m in _NUMBER.finditer(undated):
            digits = _NOT_DIGIT.sub("", m.group(0))
            if len(digits) >= 7:
                found.append(digits)
    return found


def normal_value(value: Any) -> str:
    """A value as the index keys it whole: casefolded, whitespace collapsed, numbers plain."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(str(value).split()).casefold().strip(_TRAILING + " ")


_DECIMAL = re.compile(r"\d+\.\d+")


def _words(text: str) -> Iterator[str]:
    for m in _WORD.finditer(text.casefold()):
        word = m.group(0).strip(_TRAILING).replace(",", "")
        if _DECIMAL.fullmatch(word):
            word = normal_value(float(word))  # "63.20" is the amount 63.2
        if word:
            yield word


def _leaves(value: Any, key: str = "") -> list[tuple[str, Any]]:
    """(the nearest key, the leaf) for every scalar in a JSON-like value, in order."""
    out: list[tuple[str, Any]] = []
    _walk(value, key, out)
    return out


_SCALARS = (str, int, float, bool)


def _walk(value: Any, key: str, out: list[tuple[str, Any]]) -> None:
    kind = type(value)
    if kind in _SCALARS:  # exact types first: the common case, and the cheapest test
        out.append((key, value))
    elif kind is dict or isinstance(value, Mapping):
        for name, item in value.items():
            _walk(item, name if type(name) is str else str(name), out)
    elif kind is list or isinstance(value, list | tuple):
        for item in value:
            _walk(item, key, out)
    elif value is not None:
        out.append((key, value))


# Leaves are scanned as one text (one pass instead of one per leaf); the separator is not
# part of any identifier and ends a run of numbers, so no token spans two leaves.
_JOIN = " | "


def _texts(leaves: list[tuple[str, Any]]) -> tuple[list[str], list[str]]:
    """The leaves as text, and the whole-value tokens of the short ones."""
    texts: list[str] = []
    whole: list[str] = []
    for _, leaf in leaves:
        if isinstance(leaf, str):
            texts.append(leaf)
            if len(leaf) <= SHORT_VALUE:
                whole.append(normal_value(leaf))
        else:
            text = normal_value(leaf)
            texts.append(text)
            whole.append(text)
    return texts, whole


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
        texts, tokens = _texts(_leaves(value))
        joined = _JOIN.join(texts)
        found = set(tokens)
        found.update(identifiers(joined, as_given=True))
        found.update(_words(joined))
        if self._room(len(found)):
            self.trusted |= found

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
        leaves = _leaves(value)
        if trusted_fields:
            vouched = [leaf for key, leaf in leaves if key in trusted_fields]
            if vouched:
                self.add_trusted(vouched)
            leaves = [(key, leaf) for key, leaf in leaves if key not in trusted_fields]
        if not leaves:
            return  # nothing untrusted in it: session rules do not fire on it
        if self.first_untrusted is None:
            self.first_untrusted = origin
        texts, tokens = _texts(leaves)
        tokens.extend(identifiers(_JOIN.join(texts), as_given=True))
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
    LINKS = "links"  # only addresses, URLs and domains: content that may quote data freely
    TRUSTED = "trusted"  # the whole value: it must appear in trusted input
    ANY = "any"  # nothing: content the user expects to come from data


@dataclass(frozen=True, slots=True)
class ArgumentProvenance:
    """Where one argument's value came from, as a policy reason and an approval show it."""

    argument: str
    trust: Trust
    raw: Any  # the argument as proposed: shown only through ``value``
    token: str | None  # the identifier (or value) that decided, if not the whole value
    origin: Origin | None
    sensitive: bool = False

    @property
    def value(self) -> Any:
        """The argument masked as approvals mask it, cut to ``SHOWN`` characters (made when
        shown: most calls are never shown to anyone)."""
        return _shown(self.raw, self.sensitive)

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
    if check is Check.ANY:
        return ArgumentProvenance(
            argument=name, trust=Trust.NONE, raw=value, token=None, origin=None, sensitive=sensitive
        )
    worst: tuple[Trust, str | None, Origin | None] = (Trust.NONE, None, None)
    seen = False
    extract = links if check is Check.LINKS else identifiers
    for _, leaf in _leaves(value):
        if not isinstance(leaf, str):
            continue
        placed = False
        for found in extract(leaf):
            seen = placed = True
            trust, origin = index.place(found)
            if _RANK[trust] > _RANK[worst[0]]:
                worst = (trust, None if sensitive else found, origin)
        if not placed:
            # Fail closed: a destination the scanner cannot read (a homoglyph domain, a
            # quoted address) is unknown, never "nothing to check".
            odd = unplaced(leaf)
            if odd is not None:
                seen = True
                if _RANK[Trust.UNKNOWN] > _RANK[worst[0]]:
                    worst = (Trust.UNKNOWN, None if sensitive else odd, None)
    if check is Check.TRUSTED and not seen and not isinstance(value, Mapping | list | tuple):
        # No identifier in it (a name, an amount): the value itself must be trusted input,
        # whole or word by word.
        whole = normal_value(value)
        trust, origin = index.place(whole)
        if trust is not Trust.TRUSTED and all(w in index.trusted for w in _words(whole)):
            trust, origin = Trust.TRUSTED, None
        worst = (trust, None, origin)
    trust, token, origin = worst
    return ArgumentProvenance(
        argument=name, trust=trust, raw=value, token=token, origin=origin, sensitive=sensitive
    )


def _shown(value: Any, sensitive: bool) -> Any:
    from tether.core.approvals import mask_value  # approvals -> identity -> policy -> here

    if sensitive:
        return "[REDACTED]"
    masked = mask_value(value)[0]
    if isinstance(masked, str) and len(masked) > SHOWN:
        return masked[: SHOWN - 1] + "…"
    return masked


def egress_label(
    index: ProvenanceIndex,
    name: str,
    value: Any,
    allowed: frozenset[str],
    *,
    follow_links: bool = False,
) -> ArgumentProvenance:
    """An egress argument (a URL to fetch): where its domain came from. A domain on the
    allow-list (or under one) counts as trusted configuration. ``follow_links``: a URL the
    run has seen verbatim — path and query exactly as given — may be fetched even if its
    domain is untrusted: the request then carries nothing but the link itself."""
    host = domain_of(fold(value)) if isinstance(value, str) else None
    if host is None:
        return ArgumentProvenance(
            argument=name, trust=Trust.NONE, raw=value, token=None, origin=None
        )
    if _allowed(host, allowed):
        return ArgumentProvenance(
            argument=name, trust=Trust.TRUSTED, raw=value, token=host, origin=None
        )
    if follow_links and isinstance(value, str):
        link = _verbatim(value)
        if link is not None and (link in index.trusted or link in index.untrusted):
            return ArgumentProvenance(
                argument=name, trust=Trust.TRUSTED, raw=value, token=link, origin=None
            )
    # Only the exact host is trusted: a subdomain of a trusted domain may be anyone's
    # (pages on a shared host), so trust does not flow down from the registrable part.
    trust, origin = index.place(host)
    if trust is Trust.UNKNOWN:
        found, found_origin = index.place(".".join(host.split(".")[-2:]))
        if found is Trust.UNTRUSTED:
            trust, origin = found, found_origin
    return ArgumentProvenance(argument=name, trust=trust, raw=value, token=host, origin=origin)


def _verbatim(url: str) -> str | None:
    """A URL as the index keys a link seen whole (query kept, fragment and www. dropped)."""
    match = _URL.search(url.strip().lower())
    if match is None:
        return None
    tokens = list(_url_tokens(match.group(0)))
    # _url_tokens gives the URL without its query, then the link as given if that differs
    return tokens[1] if len(tokens) > 1 and "://" in tokens[1] else tokens[0]


def _allowed(host: str, allowed: frozenset[str]) -> bool:
    if host in allowed:
        return True
    return any(host.endswith("." + domain) for domain in allowed)
