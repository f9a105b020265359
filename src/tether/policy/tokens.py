"""The tokens a value is matched by: identifiers, typed scalars, phrases and private words.

Every token carries its kind in its shape, so a value can only be vouched for by a trusted
token of the same kind:

- identifiers (``identifiers``): an e-mail address (``a@host``), a link (``//host/path``,
  scheme dropped), a host (``example.org``, and its registrable domain), a file path
  (``/docs/x``), an IBAN, a phone number (digits only), an id-like word (``inv-2291``); a word
  that looks like a destination but cannot be read is a token of its own;
- typed scalars (``scalar_token``, ``typed_words``): an amount ``n:5``, an id number ``i:5``,
  a date ``d:2026-12-10``, a time ``t:16:00``. "16:00" in a request is a time, never the id
  16; "transaction 5" is an id, never the amount 5.00;
- phrases (``phrase``): the words of a text, lowercased and single-spaced; a name is vouched
  for only as a contiguous phrase of trusted text, not word by word;
- private words (``private_words``): what of a private record would leak if sent on — words
  of three characters or more with a digit in them (codes, passwords, account numbers,
  amounts like ``4210.55``), dates and times aside.

Pure and in memory; the hot path is ``identifiers`` over untrusted output, written to split
the text once (in C), read each word with the cheapest checks first, and remember what each
word yields. The module is long because every kind of token is read here, in one place, so a
value and the trusted token that vouches for it are always read alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from tether.policy.destinations import (
    STRIP,
    fold,
    host_tokens,
    looks_like_destination,
    parse_address,
    parse_host,
    parse_link,
)

_ID_WORD = re.compile(r"(?=[a-z_\-]*\d)(?=[\d_\-]*[a-z])[a-z0-9][a-z0-9_\-]{4,}")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_IBAN_WORD = re.compile(r"[a-z]{2}\d{2}[a-z0-9]{8,30}")
_NOT_DIGIT = re.compile(r"\D")


def identifiers(text: str, *, as_given: bool = False) -> list[str]:
    """The identifier tokens in ``text``: what a consequential argument is checked by.
    ``as_given``: also each link as written, query and all (the index keeps those, so a link
    followed verbatim can be recognised)."""
    return _scan(fold(text), every_kind=True, as_given=as_given)


def links(text: str) -> list[str]:
    """Only the tokens that say where something goes: addresses, links and hosts."""
    return _scan(fold(text), every_kind=False, as_given=False)


# Python's regular expressions have no fast skip for a character class, so a pattern run over
# a whole text tries every position: tens of microseconds per kilobyte. The text is split
# into words once instead (in C), and each word is read on its own (``_word``); phone numbers
# are read off runs of number-like words as they pass, and only a spaced IBAN sends a pattern
# over the text. What a word yields depends on nothing but the word (lowercased, as split) and
# the two modes, so it is remembered per word: text repeats its words (greetings, units,
# signatures, the same link), and a remembered word costs one dictionary lookup.
_PHONE_CHARS = "+-().0123456789"
_FILE_NAME = re.compile(r"[a-z0-9_\-]+(?:\.[a-z0-9_\-]+)*\.[a-z][a-z0-9]{0,4}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")

# What one word yields: the digits it adds to a run of number-like words (None: it is not
# one, and ends any run), whether the run ends after it (a comma or semicolon), its tokens,
# and whether it may start a spaced IBAN ("DE44 5001 ...").
_Word = tuple[str | None, bool, tuple[str, ...], bool]
_NOTHING: _Word = (None, False, (), False)
_REMEMBERED = 16_384  # words per mode; past it the memory starts again (bounded, still pure)
_LONGEST_REMEMBERED = 64  # longer words (a blob, a long link) are read, not remembered
_words: dict[tuple[bool, bool], dict[str, _Word]] = {}


def _scan(text: str, *, every_kind: bool, as_given: bool) -> list[str]:
    found: list[str] = []
    spaced_iban = False
    run: list[str] = []  # the digits of the current run of number-like words
    known = _words.setdefault((every_kind, as_given), {})
    for raw in text.lower().split():
        word = known.get(raw)
        if word is None:
            word = _word(raw, every_kind, as_given)
            if len(raw) <= _LONGEST_REMEMBERED:
                if len(known) >= _REMEMBERED:
                    known.clear()
                known[raw] = word
        digits, ends, tokens, spaced = word
        if digits is not None:
            run.append(digits)
            if ends:
                _phone(run, found)  # "call 555 123 4567, or" ends at the comma
            continue
        if run:
            _phone(run, found)
        if tokens:
            found.extend(tokens)
        if spaced:
            spaced_iban = True
    if run:
        _phone(run, found)
    if spaced_iban:
        found.extend(m.group(0).replace(" ", "").lower() for m in _IBAN.finditer(text.upper()))
    return found


def _word(raw: str, every_kind: bool, as_given: bool) -> _Word:
    """What one word of folded, lowercased text yields (see ``_Word``), cheapest checks first."""
    if raw.isalpha() and raw.isascii():  # most words: letters only, nothing to find
        return _NOTHING
    word = raw.strip(STRIP)
    if every_kind and word and not word.strip(_PHONE_CHARS) and not _DATE.fullmatch(word):
        return (_NOT_DIGIT.sub("", word), raw[-1] in ",;", (), False)
    if len(word) < 4 or (word.isalpha() and word.isascii()):
        return _NOTHING
    if "@" in word and "://" not in word:
        address = parse_address(word.removeprefix("mailto:"))
        if address is not None:
            return (None, False, (address[0], *host_tokens(address[1])), False)
        if looks_like_destination(word):
            return (None, False, (word,), False)  # unreadable: unknown unless this word was seen
        return _NOTHING
    if "//" in word or "/" in word.lstrip("/~."):
        link = parse_link(word) if word[0] not in "/~." or word.startswith("//") else None
        if link is not None:
            given = (link.as_given,) if as_given and link.query else ()
            return (None, False, (link.token, *given, *host_tokens(link.host)), False)
        if word.startswith("//"):
            return (None, False, (word,), False)
    if word[0] in "/~.":
        if every_kind and "/" in word:
            return (None, False, (word.rstrip("/."),), False)
        return _NOTHING
    if "." in word:
        host = parse_host(word)
        if host is not None:
            return (None, False, host_tokens(host), False)
        if every_kind and _FILE_NAME.fullmatch(word):
            return (
                None,
                False,
                (word,),
                False,
            )  # a file name ("b.txt"): where a call reads or writes
    if not word.isascii():
        return (None, False, (word,), False) if looks_like_destination(word) else _NOTHING
    if every_kind and not word.isdigit():
        spaced = False
        if word[:2].isalpha() and word[2:4].isdigit():  # an IBAN, whole or its first group
            if len(word) == 4:
                spaced = True
            elif _IBAN_WORD.fullmatch(word):
                return (None, False, (word,), False)
        if _ID_WORD.fullmatch(word) is not None:
            return (None, False, (word,), spaced)
        return (None, False, (), spaced)
    return _NOTHING


def _phone(run: list[str], found: list[str]) -> None:
    """End a run of number-like words: seven digits or more are a phone or account number."""
    digits = "".join(run)
    if len(digits) >= 7:
        found.append(digits)
    run.clear()


# -- typed scalars ---------------------------------------------------------------------------
_ID_KEYS = ("id", "number", "no", "ref", "reference")
_ID_BEFORE = frozenset(
    [
        "id",
        "#",
        "no",
        "no.",
        "number",
        "transaction",
        "order",
        "ticket",
        "invoice",
        "file",
        "room",
        "reservation",
        "booking",
        "flight",
        "item",
    ]
)
_NUMERIC = re.compile(r"[+\-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?|[+\-]?\d+(?:\.\d+)?")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = re.compile(r"(\d{1,2}):(\d{2})")


_ID_SUFFIXES = tuple("_" + k for k in _ID_KEYS)


@lru_cache(maxsize=4096)
def id_like(key: str) -> bool:
    """Whether an argument or result key names an identifier (``id``, ``file_id``, …)."""
    key = key.lower()
    return key in _ID_KEYS or key.endswith(_ID_SUFFIXES)


def _number(text: str) -> str:
    value = float(text.replace(",", ""))
    return str(int(value)) if value.is_integer() else repr(value)


def scalar_token(key: str, value: Any) -> str | None:
    """The token a whole scalar value is matched by; None for what carries nothing to
    check (``None``, a boolean). ``key``: the argument or result key it sits under, which
    says whether a number is an amount or an id."""
    if value is None or isinstance(value, bool):
        return None
    kind = type(value)
    if kind is int or kind is float or isinstance(value, int | float):
        number = float(value)
        plain = str(int(number)) if number.is_integer() else repr(number)
        return ("i:" if id_like(key) else "n:") + plain
    text = value if kind is str else str(value)
    # Short texts (names, ids, dates: what records repeat) are read once; the key only says
    # which kind a number is, so what is remembered is the text's reading without it.
    number, token = _text_token(text) if len(text) <= _SHORT_TEXT else _read_text(text)
    return ("i:" if id_like(key) else "n:") + token if number else token


_SHORT_TEXT = 64


def _read_text(value: str) -> tuple[bool, str]:
    """A text scalar's token, and whether it is a number (whose kind the key decides)."""
    text = " ".join(value.split()).casefold().strip(".,;:!?)]}'\" ")
    if not text[:1].isdigit() and text[:1] not in "+-":
        return False, text  # not a number, a date or a time: a name or other text
    if _NUMERIC.fullmatch(text):
        return True, _number(text)
    if _ISO_DATE.fullmatch(text):
        return False, "d:" + text
    time = _TIME.fullmatch(text)
    if time is not None:
        return False, f"t:{int(time.group(1)):02d}:{time.group(2)}"
    return False, text


_text_token = lru_cache(maxsize=8192)(_read_text)


_TYPED = re.compile(
    r"(?P<date>\b\d{4}-\d{2}-\d{2}\b)|(?P<time>\b\d{1,2}:\d{2}\b)"
    r"|(?P<num>(?<![\w.\-/:])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w:/])"
    r"|(?<![\w.\-/:])\d+(?:\.\d+)?(?![\w:/]|[.,]\d))"
)


_ANY_DIGIT = re.compile(r"\d")


def typed_words(text: str) -> Iterator[str]:
    """The dates, times and numbers of free text, typed: a number right after an id word
    (``transaction 5``, ``#5``) is an id, any other an amount."""
    if _ANY_DIGIT.search(text) is None:
        return
    lowered = text.lower()
    for m in _TYPED.finditer(lowered):
        if m.group("date"):
            yield "d:" + m.group("date")
        elif m.group("time"):
            hours, minutes = m.group("time").split(":")
            yield f"t:{int(hours):02d}:{minutes}"
        else:
            start = m.start()
            before = lowered[max(0, start - 16) : start].split()
            prior = before[-1] if before else ""
            is_id = lowered[start - 1 : start] == "#" or prior.strip(".:") in _ID_BEFORE
            yield ("i:" if is_id else "n:") + _number(m.group("num"))


_WORD = re.compile(r"\w(?:[\w'.\-]|,(?=\d{3}))*")


@lru_cache(maxsize=8192)
def short_phrase(text: str) -> str:
    """``phrase`` of a short value (a name, an address), remembered: they repeat."""
    return phrase(text)


def phrase(text: str) -> str:
    """The words of ``text``, lowercased and single-spaced, a possessive's ``'s`` dropped:
    what a phrase match compares ("Hotel Lumen's" names "Hotel Lumen")."""
    return " ".join(w.strip(".'-").removesuffix("'s") for w in _WORD.findall(text.casefold()))


_PART = re.compile(r"[^\W_]+")
# Words too common to say which record a request means: function words, and the parts of
# addresses, paths and links that many records share.
_COMMON = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "at",
        "be",
        "by",
        "com",
        "de",
        "for",
        "from",
        "in",
        "is",
        "it",
        "me",
        "my",
        "net",
        "no",
        "of",
        "on",
        "or",
        "org",
        "our",
        "re",
        "the",
        "this",
        "to",
        "we",
        "with",
        "you",
        "your",
        "fwd",
        "www",
        "io",
        "http",
        "https",
        "docs",
        "doc",
        "txt",
        "pdf",
        "md",
        "zip",
        "csv",
        "json",
        "html",
        "file",
        "files",
        "email",
        "mail",
        "inbox",
    ]
)


@lru_cache(maxsize=8192)
def record_words(text: str) -> frozenset[str]:
    """The parts of ``text`` (split at anything not a letter or digit) that can say which
    record a request means: "Carol's kickoff email" and a record sent by carol.diaz@… titled
    "Project kickoff" share ``carol`` and ``kickoff``."""
    return frozenset(
        w
        for w in _PART.findall(text.casefold())
        if len(w) > 1 and not w.isdigit() and w not in _COMMON
    )


@lru_cache(maxsize=1024)
def intent_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    """Any of ``phrases`` as words of a request, each word also as a prefix ("pay" in
    "paying", "book" in "booking")."""
    alternatives = [
        r"\w*\s+".join(re.escape(w) for w in phrase(p).split()) + r"\w*" for p in phrases
    ]
    alternatives = [a for a in alternatives if a != r"\w*"] or ["(?!)"]
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + ")")


# -- private words ---------------------------------------------------------------------------
# Only words with a digit can be private words: a run of characters between separators, with
# a digit in it, found by a pattern (in C). Whitespace is a separator, so the runs of a text
# are the runs of its whitespace-split words, each found alone exactly as in the whole text:
# the text is split once, letter-only words (never a digit, never a separator) passed over,
# and what each other word yields remembered, as ``_scan`` does.
_SEPARATORS = r"\s/?&=#,;()\[\]{}<>\"'`|"
_DIGITED = re.compile(rf"(?<![^{_SEPARATORS}])[^{_SEPARATORS}\d]*\d[^{_SEPARATORS}]*")
_private_in: dict[str, tuple[str, ...]] = {}


def private_words(text: str) -> set[str]:
    """What of a private text would leak if sent on (see the module docstring)."""
    found: set[str] = set()
    known = _private_in
    for raw in fold(text).lower().split():
        if raw.isalpha():
            continue
        words = known.get(raw)
        if words is None:
            words = _digited(raw)
            if len(raw) <= _LONGEST_REMEMBERED:
                if len(known) >= _REMEMBERED:
                    known.clear()
                known[raw] = words
        if words:
            found.update(words)
    return found


def _digited(text: str) -> tuple[str, ...]:
    """The private words of ``text`` (folded, lowercased): the runs with a digit, dates and
    times aside."""
    found: list[str] = []
    for match in _DIGITED.finditer(text):
        word = match.group(0).strip(".:!*")
        if len(word) < 3 or _ISO_DATE.fullmatch(word) or _TIME.fullmatch(word):
            continue
        found.append(word)
    return tuple(found)
