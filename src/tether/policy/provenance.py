"""Where the values of a call come from, who may read them, and what the user asked for:
trust labels and the per-run provenance index.

The user's messages and the principal's configuration are trusted; a tool's output is
untrusted unless its manifest (or the policy) says the tool is a system of record. For every
proposed call, each argument's tokens (``tether.policy.tokens``: addresses, links, hosts,
IBANs, account and phone numbers, paths, ids, and typed amounts, ids, dates, times and name
phrases) are looked up in an index of what the run has seen so far: found in trusted input,
found only in the output of some earlier call (and which one), or found nowhere. The policy
then decides over those labels (``tether.policy.flow``), so a value an injected web page or
email put in front of the model cannot quietly decide where money, mail or data goes.

The index fails closed: what it cannot place is ``unknown``, never trusted — a destination
the scanner cannot read is a token of its own (``tether.policy.destinations``), and a trusted
token vouches only for a value of its own kind. It also knows two more things: which tokens
the user's own words name (``requested``: the intent rule), and which words came from
private data and who may read them (``private``: the readers rule).

Everything here is pure and in memory. The index is fed by the gate at every dispatch and
rebuilt, when a process does not have it, from durable rows (``tether.gate.indexes``), so a
run resumed elsewhere knows the same. It is bounded: past ``MAX_TOKENS`` it stops learning
and marks itself full, and a full index reports values it cannot place as untrusted rather
than unknown, so overflow never turns into trust.

The module is long because the index and the labels it gives are one vocabulary (trust,
origin, requested, readers): splitting them would split every rule that reads both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tether.core.screening import redact
from tether.policy.destinations import (
    destination,
)
from tether.policy.tokens import (
    id_like,
    identifiers,
    intent_pattern,
    links,
    phrase,
    private_words,
    record_words,
    scalar_token,
    short_phrase,
    typed_words,
)
from tether.policy.values import (
    JOIN,
    SHORT_VALUE,
    Row,
    has_digit,
    leaves,
    normal_value,
    parse_paths,
    reader,
    records,
    rows,
    texts_of,
    under,
)

MAX_TOKENS = 20_000  # per run; a token is a short string, so a full index is a few MB
# Outputs remembered as learned, so one read again is not learned again (``add_output``):
# each up to the first figure in characters, a run's together up to the second.
REMEMBERED_OUTPUT = 8_192
REMEMBERED_CHARS = 65_536  # per run: at most 16 MB over the 256 runs a gate keeps indexed
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


def domain_of(value: str) -> str | None:
    """The host a link, an address or a bare host name sends to (lowercased, without
    ``www.``), or None: the one reading egress and the checks share."""
    return destination(value)


class ProvenanceIndex:
    """What one run has seen: trusted tokens, each untrusted token's first origin, what the
    user asked for, and who may read each private value.

    Mutated only by the gate (``add_trusted``, ``add_output``, ``note_call``); the planner
    reads it."""

    __slots__ = (
        "allowed_tools",
        "asked",
        "asked_words",
        "done",
        "effects",
        "epoch",
        "first_untrusted",
        "flagged",
        "followed",
        "full",
        "learned",
        "learned_chars",
        "phrases",
        "private",
        "private_refs",
        "requested",
        "trusted",
        "untrusted",
        "user_words",
        "widest",
    )

    def __init__(self, trusted_values: Iterable[str] = ()) -> None:
        self.trusted: set[str] = set()
        self.untrusted: dict[str, Origin] = {}
        self.phrases = " | "  # trusted text, as phrases: what names are matched against
        # Intent: tokens the user's own words name (or that a trusted record they name
        # holds), the user's words as phrases, and the tools the application allowed.
        self.requested: set[str] = set()
        self.asked = " | "
        self.asked_words: set[str] = set()
        self.user_words: set[str] = set()
        self.allowed_tools: frozenset[str] | None = None
        # Confidentiality: private word -> who may read it, and where it was first seen.
        self.private: dict[str, tuple[frozenset[str], Origin]] = {}
        # Ids of private records (an email's id): an argument holding one carries the record.
        self.private_refs: dict[str, tuple[frozenset[str], Origin]] = {}
        self.flagged: Origin | None = None  # the first output screening flagged
        self.first_untrusted: Origin | None = None  # the first untrusted output at all
        self.full = False
        self.effects = 0  # effects of the run this index has accounted for
        self.followed = 0  # links followed on ``follow_links`` authority
        self.done: dict[str, dict[str, str]] = {}  # tool -> argument digest -> call id
        # Outputs learned (``add_output``) -> the epoch (the user's messages so far) it was
        # learned in and the most tokens it asked room for.
        self.learned: dict[tuple[Any, ...], tuple[int, int]] = {}
        self.learned_chars = 0
        self.epoch = 0
        self.widest = 0  # the most tokens one ``_room`` asked for, while an output is learned
        for value in trusted_values:
            self.add_trusted(value, user=True, said=False)

    def _room(self, n: int) -> bool:
        self.widest = max(self.widest, n)
        if len(self.trusted) + len(self.untrusted) + len(self.private) + n > MAX_TOKENS:
            self.full = True
        return not self.full

    def add_trusted(self, value: Any, *, user: bool = False, said: bool = True) -> None:
        """Trusted input: the user's request (``user``), configuration, a system of
        record's output. ``said``: with ``user``, words of a request (configuration, such
        as the user's own address, is the user's but asks for nothing)."""
        self._trust(leaves(value), value, user=user, said=said)

    def _trust(
        self,
        found_leaves: list[tuple[str, Any]],
        value: Any,
        *,
        user: bool = False,
        said: bool = True,
    ) -> None:
        texts, tokens = texts_of(found_leaves)
        joined = JOIN.join(texts)
        found = set(tokens)
        found.update(identifiers(joined, as_given=True))
        found.update(typed_words(joined))
        if not self._room(len(found)):
            return
        self.trusted |= found
        spoken = "".join(f" {phrase(t)} |" for t in texts)
        self.phrases += spoken
        if user:
            self.epoch += 1
            self.requested |= found
            if said:
                self.asked += spoken
                self.asked_words |= record_words(joined)
            self.user_words |= private_words(joined)
            for word in self.user_words & self.private.keys():
                del self.private[word]  # the user said it: theirs to send
        elif self.asked_words:
            self._select(value, found)

    def allow_tools(self, names: Iterable[str]) -> None:
        """The application's allow-list for this request: the tools it may call."""
        self.allowed_tools = (self.allowed_tools or frozenset()) | frozenset(names)

    def _select(self, value: Any, tokens: set[str]) -> None:
        """The records of a trusted output the user's words name (a contact looked up by
        the name in the request, the payee the request names, a file the request calls "my
        meeting notes"): their values are requested. ``tokens``: the whole value's."""
        for record in records(value):
            if not isinstance(record, Mapping):
                continue
            if self._names(rows(record)) or any(
                self._named(v) for v in record.values() if isinstance(v, str)
            ):
                if record is value:
                    self.requested |= tokens  # the one record: its tokens are known
                else:
                    self._request(leaves(record))
                continue
            for name, item in record.items():  # a mapping of names to values (payees)
                if isinstance(name, str) and self._named(name):
                    self._request(leaves(item))

    def _named(self, text: str) -> bool:
        if len(text) > SHORT_VALUE:
            return False  # a name, not a text
        words = short_phrase(text)
        return len(words) >= 3 and f" {words} " in self.asked

    def _request(self, found: list[tuple[str, Any]]) -> None:
        texts, tokens = texts_of(found)
        self.requested.update(tokens)
        self.requested.update(identifiers(JOIN.join(texts)))

    def add_output(
        self,
        origin: Origin,
        value: Any,
        *,
        trusted: bool = False,
        trusted_fields: frozenset[str] = frozenset(),
        flagged: bool = False,
        private: bool = False,
        readers_from: tuple[str, ...] = (),
        recorded: str | None = None,
    ) -> None:
        """A tool's (redacted) result. ``trusted_fields``: paths whose values are trusted;
        ``private``/``readers_from``: the output is private data, readable by the people
        its records name at those paths (the user alone if none). ``recorded``: its JSON
        as stored, if the caller has it: an output learned before is not read again."""
        key: tuple[Any, ...] | None = None
        if recorded is not None and len(recorded) <= REMEMBERED_OUTPUT:
            fields, readers = frozenset(trusted_fields), tuple(readers_from)  # hashable
            key = (recorded, trusted, fields, flagged, private, readers)
            if self._again(key):
                return
        self.widest = 0
        self._learn(origin, value, trusted, trusted_fields, flagged, private, readers_from)
        if key is None:
            return
        known = key in self.learned  # learned again after the user spoke: already counted
        if known or self.learned_chars + len(key[0]) <= REMEMBERED_CHARS:
            self.learned[key] = (self.epoch, self.widest)
            self.learned_chars += 0 if known else len(key[0])

    def _again(self, key: tuple[Any, ...]) -> bool:
        """Whether the output ``key`` names was learned since the user last spoke; if so,
        learning it again is done here. Learning an output reads only the output, the user's
        words (the same while the epoch is) and what it writes: it adds to sets, keeps each
        token's first origin, unions readers the first pass added, sets ``flagged`` and
        ``first_untrusted`` only if unset. So a second pass changes nothing but, perhaps,
        ``full``: it asks ``_room`` for the same counts, of which the largest decides."""
        seen = self.learned.get(key)
        if seen is None or seen[0] != self.epoch:
            return False
        self._room(seen[1])
        return True

    def _learn(
        self,
        origin: Origin,
        value: Any,
        trusted: bool,
        trusted_fields: frozenset[str],
        flagged: bool,
        private: bool,
        readers_from: tuple[str, ...],
    ) -> None:
        if flagged and not trusted and self.flagged is None:
            self.flagged = origin
        found = rows(value)
        vouched_at = parse_paths(trusted_fields)
        readers_at = parse_paths(readers_from)
        if private or readers_from or (vouched_at and not trusted):
            self._records(
                origin, found, vouched_at, readers_at, private=private or bool(readers_at)
            )
        if trusted:
            self.add_trusted(value)
            return
        vouched: list[tuple[str, Any]] = []
        rest: list[tuple[str, Any]] = []
        for _, path, key, leaf in found:
            (vouched if vouched_at and under(path, vouched_at) else rest).append((key, leaf))
        if vouched:
            self._trust(vouched, [leaf for _, leaf in vouched])
        if not rest:
            return  # nothing untrusted in it: session rules do not fire on it
        if self.first_untrusted is None:
            self.first_untrusted = origin
        texts, tokens = texts_of(rest)
        tokens.extend(identifiers(JOIN.join(texts), as_given=True))
        if not self._room(len(tokens)):
            return
        untrusted = self.untrusted
        for token in tokens:
            if token not in untrusted:
                untrusted[token] = origin

    def _records(
        self,
        origin: Origin,
        found: list[Row],
        vouched_at: tuple[tuple[str, ...], ...],
        readers_at: tuple[tuple[str, ...], ...],
        *,
        private: bool,
    ) -> None:
        """Per record of an output: the vouched part of a record the request names is
        requested; a private record's words are readable by the readers it names at
        ``readers_at`` (the user alone if none), and its ids refer to it. A record the
        request names, or a field it names ("my IBAN"), is the user's to send: not marked."""
        start = 0
        while start < len(found):
            n = found[start][0]
            end = start
            while end < len(found) and found[end][0] == n:
                end += 1
            record = found[start:end]
            start = end
            if self._names(record):
                if vouched_at:
                    self._request(
                        [(k, leaf) for _, path, k, leaf in record if under(path, vouched_at)]
                    )
                continue
            if not private:
                continue
            names: set[str] = set()
            texts: list[str] = []
            refs: list[Any] = []
            for _, path, key, leaf in record:
                if readers_at and under(path, readers_at):
                    if type(leaf) is str and leaf.strip():
                        names.add(reader(leaf))
                elif id_like(key):
                    refs.append(leaf)
                elif key.casefold() not in self.asked_words:
                    texts.append(leaf if type(leaf) is str else str(leaf))
            readers = frozenset(names)
            for ref in refs:
                if isinstance(ref, str | int) and not isinstance(ref, bool):
                    self.private_refs.setdefault(normal_value(ref), (readers, origin))
            self._private(origin, JOIN.join(texts), readers)

    def _names(self, record: list[Row]) -> bool:
        """Whether the user's words name a record: two of the words of its short values
        (sender, subject, path, name, city) are in the request."""
        asked = self.asked_words
        if len(asked) < 2:
            return False
        words: set[str] = set()
        for _, _, _, leaf in record:
            if type(leaf) is str and len(leaf) <= SHORT_VALUE:
                words |= record_words(leaf) & asked
                if len(words) >= 2:
                    return True
        return False

    def _private(self, origin: Origin, text: str, readers: frozenset[str]) -> None:
        words = private_words(text)
        if not words:
            return
        words -= self.user_words
        if not self._room(len(words)):
            return
        private = self.private
        for word in words:
            known = private.get(word)
            private[word] = (readers, origin) if known is None else (known[0] | readers, known[1])

    def note_call(self, tool: str, argument_digest: str, call_id: str, *, followed: bool) -> None:
        """A call of the run was dispatched: remembered so the same call again is noticed,
        and counted against the links budget if it followed a link."""
        self.done.setdefault(tool, {}).setdefault(argument_digest, call_id)
        self.followed += followed

    def asks_for(self, tool: str, phrases: tuple[str, ...]) -> bool:
        """Whether the user's request asks for this tool: it is on the application's
        allow-list, or (with no list) one of its intent phrases is in the user's words."""
        if self.allowed_tools is not None:
            return tool in self.allowed_tools
        return intent_pattern(phrases).search(self.asked) is not None

    def states_together(self, values: list[Any], window: int = 24) -> bool:
        """Whether the user's words state ``values`` together: the first is followed, in
        order and within ``window`` characters, by the others ("from 2026-12-10 to
        2026-12-12"), and nowhere by another value of the second's kind — a request that
        gives two different ranges from the same day is ambiguous, and states neither."""
        said = [f" {phrase(str(v))} " for v in values]
        kind = scalar_token("", values[1]) or ""
        text = self.asked
        stated = False
        start = text.find(said[0])
        while start != -1:
            at = start + len(said[0]) - 1
            after = text[at : at + window + len(said[1])]
            if said[1] in after:
                stated = stated or all(
                    text.find(f, at, at + window * (n + 1) + len(f)) != -1
                    for n, f in enumerate(said[1:])
                )
            elif kind[:2] in ("d:", "t:", "n:", "i:") and any(
                t[:2] == kind[:2] for t in typed_words(after)
            ):
                return False  # the first value, with another companion of the same kind
            start = text.find(said[0], start + 1)
        return stated

    def carried(self, value: Any) -> list[tuple[str, frozenset[str], Origin]]:
        """The private words ``value`` carries, with who may read each and where it was
        seen first."""
        if not self.private_refs and (not self.private or not has_digit(value)):
            return []  # private words all have a digit
        found_leaves = leaves(value)
        texts = [t for _, t in found_leaves if isinstance(t, str)]
        found = private_words(JOIN.join(texts)) & self.private.keys()
        carried = [(w, *self.private[w]) for w in sorted(found)]
        for _, leaf in found_leaves:  # a reference: the whole value is a private record's id
            if isinstance(leaf, str | int) and not isinstance(leaf, bool):
                ref = self.private_refs.get(normal_value(leaf))
                if ref is not None:
                    carried.append((str(leaf), *ref))
        return carried

    def place(self, token: str) -> tuple[Trust, Origin | None]:
        if token in self.trusted:
            return Trust.TRUSTED, None
        origin = self.untrusted.get(token)
        if origin is not None:
            return Trust.UNTRUSTED, origin
        return (Trust.UNTRUSTED if self.full else Trust.UNKNOWN), None

    def place_scalar(self, token: str, value: Any) -> tuple[Trust, Origin | None, bool]:
        """A whole scalar's label and whether the user asked for it: typed tokens match
        only tokens of their kind; a name matches trusted text only as a whole phrase."""
        trust, origin = self.place(token)
        words = phrase(value) if ":" not in token[:2] and isinstance(value, str) else ""
        asked = token in self.requested or bool(words and f" {words} " in self.asked)
        if token in self.trusted:
            return trust, origin, asked
        if words and f" {words} " in self.phrases:
            return Trust.TRUSTED, None, asked
        return trust, origin, False


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
    # Intent: every trusted value in it is one the user's own words name (or a trusted
    # record they name holds), not merely one a system of record vouches for.
    requested: bool = True
    followed: bool = False  # egress allowed because it follows a link the run was given
    checked: bool = True  # False: the check was "any", nothing of it was looked at

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
            "checked": self.checked,
            "identifier": self.token,
            "call_id": None if self.origin is None else self.origin.call_id,
            "tool": None if self.origin is None else self.origin.tool,
        }

    def describe(self) -> str:
        """One line for a reason or an approval: which value, from where."""
        what = f"argument '{self.argument}'"
        if self.token is not None:
            what += f" ({quote(self.token)})"
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


def quote(token: str) -> str:
    """A token as a reason quotes it: cut, secrets masked."""
    shown = token if len(token) <= SHOWN else token[: SHOWN - 1] + "…"
    return repr(redact(shown)[0])


_RANK = {Trust.NONE: 0, Trust.TRUSTED: 1, Trust.UNKNOWN: 2, Trust.UNTRUSTED: 3}


def label_argument(
    index: ProvenanceIndex, name: str, value: Any, check: Check, sensitive: bool
) -> ArgumentProvenance:
    """The label of one argument: the worst of its tokens. Every leaf of a list or object is
    checked (and every key that could hold an identifier); ``None`` and booleans carry
    nothing to check; a leaf with no identifier is, under ``trusted``, matched whole, by its
    kind (an amount, an id, a date, a time, a name as a phrase)."""
    if check is Check.ANY:
        return ArgumentProvenance(
            argument=name,
            trust=Trust.NONE,
            raw=value,
            token=None,
            origin=None,
            sensitive=sensitive,
            checked=False,
        )
    worst: tuple[Trust, str | None, Origin | None] = (Trust.NONE, None, None)
    requested = True
    extract = links if check is Check.LINKS else identifiers
    requested_tokens = index.requested
    for key, leaf in leaves(value, name):
        if isinstance(leaf, str):
            found = extract(leaf)
            for found_token in found:
                trust, origin = index.place(found_token)
                if trust is Trust.TRUSTED and found_token not in requested_tokens:
                    requested = False
                if _RANK[trust] > _RANK[worst[0]]:
                    worst = (trust, None if sensitive else found_token, origin)
            if found or check is not Check.TRUSTED:
                continue
        elif check is not Check.TRUSTED:
            continue
        whole = scalar_token(key, leaf)
        if whole is None:
            continue
        trust, origin, asked = index.place_scalar(whole, leaf)
        requested = requested and (asked or trust is not Trust.TRUSTED)
        if _RANK[trust] > _RANK[worst[0]]:
            worst = (trust, None, origin)
    trust, token, origin = worst
    return ArgumentProvenance(
        argument=name,
        trust=trust,
        raw=value,
        token=token,
        origin=origin,
        sensitive=sensitive,
        requested=requested,
    )


def _shown(value: Any, sensitive: bool) -> Any:
    from tether.core.approvals import mask_value  # approvals -> identity -> policy -> here

    if sensitive:
        return "[REDACTED]"
    masked = mask_value(value)[0]
    if isinstance(masked, str) and len(masked) > SHOWN:
        return masked[: SHOWN - 1] + "…"
    return masked
