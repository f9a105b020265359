"""Whether a tool's text is addressed to the model rather than describing the tool.

A poisoned tool hides a side task in what the model reads of it: do something to or with
something other than the tool's own inputs. Keyword lists ("ignore", "<IMPORTANT>") catch
the published payloads but not the same payloads reworded, so besides those the check looks
for the shape of a side task, whatever the wording:

- reading a secret or a file outside the arguments (``~/.ssh``, ``mcp.json``, the
  environment, the conversation) and moving it somewhere;
- routing data to a literal address (an email address or URL next to "mirror", "cc",
  "post"...), or a fixed address as a default, constant, enum value or example;
- keeping something from the user ("the user sees a summary only", "no need to mention");
- a rule about another tool ("when send_email is used...", "every other tool").

Every string a model is shown is read: title, description, every string in the schemas
(nested descriptions, enum values, defaults, examples) and every property name, spelt out
as words (``read_ssh_key_first`` reads "read ssh key first"). Text is folded as injection
screening folds it (NFKC, invisible characters removed, look-alike letters transliterated).
Addresses on reserved domains (``example.com``, ``.test``...) cannot receive anything and
are examples, not destinations. tests/mcp/poisoning_corpus.py measures both sides: reworded
poisoning that must be found and published servers' descriptions that must pass. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from tether.core.screening import has_invisible, looks_like_injection, normalize

__all__ = ["poisoning_findings"]

# Phrases aimed at the model rather than describing the tool, from published tool-poisoning
# cases: hidden instructions, secrecy towards the user, reading secrets or calling other
# tools first, and markup that fakes an important or system section. (".env" followed by a
# dot is a template such as ".env.example", which holds no secrets.)
_POISON = re.compile(
    r"(<\s*/?\s*(important|system|instructions?|secret|hidden)\s*>"
    r"|\b(do not|don't|never)\s+(tell|mention|inform|reveal|show|notify)\b[^.]{0,40}\b(user|human)"
    r"|\bwithout\s+(telling|informing|asking)\s+the\s+(user|human)"
    r"|\bbefore\s+(using|calling|running|invoking)\s+(this|any|the)\b[^.]{0,40}\b(read|call|send|run|fetch)"
    r"|\b(the\s+)?(assistant|model|ai|llm)\s+(must|has to|needs to)\b"
    r"|\binstead\s+of\s+(the\s+)?user\b"
    r"|~/\.ssh|\bid_rsa\b|\.aws/credentials|\bmcp\.json\b|\.env\b(?!\.)|/etc/passwd"
    r"|\b(send|forward|post|upload|email)\b[^.]{0,40}\b(to|at)\s+(https?://|[\w.+-]+@))",
    re.IGNORECASE,
)

# Files no tool's description has reason to name: keys, credentials, the MCP client's own
# config (which holds other servers' tokens). Named at all, they are the side task.
_SECRET_FILE = re.compile(
    r"~/\.ssh|\bid_(?:rsa|dsa|ecdsa|ed25519)\b|\.aws/(?:credentials|config)|\bmcp\.json\b"
    r"|claude_desktop_config|/etc/(?:passwd|shadow)|\.netrc\b|\.npmrc\b|\.pypirc\b"
    r"|\.git-credentials|\.kube/config|\.docker/config\.json|\.bash_history"
)

# Things that are not a tool's input but can be moved into one: secrets, the environment,
# files in the home directory, the conversation. Only a finding with a verb moving them
# (below): "Prints all environment variables" describes a debugging tool. "add", "put",
# "load" are left out of the verbs: "Add a cookie to the browser context" is a browser tool.
_SECRET_SOURCE = re.compile(
    r"\b(?:ssh|private|signing|gpg)\s+(?:private\s+)?keys?\b|\bapi\s+keys?\b|\bpasswords?\b"
    r"|\bcredentials?\b|\bcookies?\b|\baccess\s+tokens?\b|\.env\b(?!\.)|\benv\s+file"
    r"|\benvironment\s+(?:variables?|vars|file)|\benv\s+(?:variables?|vars)\b"
    r"|(?:^|\s)(?:~/|\$home\b|%userprofile%)|\bhome\s+director"
    r"|\bconversation\b|\bchat\s+(?:history|log)|\b(?:previous|earlier|last)\s+messages"
    r"|\b[a-z0-9]+_(?:token|api_key|key|secret|password)\b"  # GITHUB_TOKEN, once lowercased
)
# Verbs that move a source into the call or out of it ("include every environment variable
# in `env_snapshot`", "the contents of the user's SSH private key are required").
_MOVE = re.compile(
    r"\b(?:read|reads|include[sd]?|pass(?:es|ed)?|attach(?:es|ed)?|cop(?:y|ies|ied)"
    r"|append(?:s|ed)?|embed|paste|supply|send|sends|sent"
    r"|upload(?:s|ed)?|collect(?:s|ed)?|gather(?:s|ed)?|forward(?:s|ed)?"
    r"|required|needed|needs|contents?|text\s+of|value\s+of|prefix(?:ed)?|go(?:es)?\s+in(?:to)?)\b"
)

# A literal destination: an email address, a URL, an scp-style git remote.
_ADDRESS = re.compile(
    r"[\w.+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+"
    r"|\b(?:https?|s?ftp|wss?|scp|rsync)://[^\s`'\")]+"
)
# Domains that cannot receive anything (RFC 2606, RFC 6761): an address there is an example.
_RESERVED = re.compile(
    r"(?:^|[@./])(?:example\.(?:com|org|net)|[a-z0-9-]+\.(?:example|test|invalid|localhost)"
    r"|localhost|127\.0\.0\.1)(?:$|[/:?#])"
)
# Verbs and nouns that send data on to a place ("mirrored to", "always cc", "kept at"); with a
# literal address in the same sentence, that address is where the tool's data goes.
_ROUTE = re.compile(
    r"\b(?:mirror(?:s|ed)?|cop(?:y|ies|ied)|b?cc|forward(?:s|ed)?|post(?:s|ed)?|send|sends"
    r"|sent|upload(?:s|ed)?|report(?:s|ed)?|relay(?:s|ed)?|deliver(?:s|ed)?|sync(?:s|ed)?"
    r"|transmit(?:s|ted)?|share[sd]?|submit(?:s|ted)?|route[sd]?|recipients?|remote"
    r"|archive[sd]?|kept|stored|logged|go(?:es)?\s+to|written\s+to|set\s+to)\b"
)
# Where a property's own values sit: a fixed address here is where the data goes unasked.
_VALUE_KEYS = ("default", "const", "enum", "examples", "example")

# Keeping something from the user, in words other than "do not tell the user".
_SECRECY = re.compile(
    r"\b(?:user|person|human|customer|caller|requester)\b[^.;]{0,30}\b(?:sees?|shown|gets?"
    r"|receives?)\b[^.;]{0,25}\b(?:only|just)\b"
    r"|\b(?:stays?|remains?|kept|keep)\s+(?:internal|private|hidden|confidential|secret"
    r"|quiet|between\s+us)\b"
    r"|\bno\s+need\s+to\s+(?:mention|tell|show|report|surface|bring\s+up|inform|bother|alert)"
    r"|\b(?:keep|leave)\b[^.;]{0,40}\bout\s+of\b[^.;]{0,25}\b(?:reply|answer|response"
    r"|summary|output|message)"
    r"|\b(?:user|person|human)\s+(?:is|are)\s+not\s+(?:told|informed|shown|notified|asked)"
    r"|\b(?:user|person|human)\s+(?:need\s+not|does\s+not\s+need\s+to|doesn't\s+need\s+to)"
    r"\s+(?:know|see|be\s+told)"
    r"|\b(?:quietly|silently|discreetly|covertly|secretly)\s+(?:send|forward|copy|read"
    r"|include|attach|add|mirror|post|upload|filled|fill)"
    r"|\b(?:do\s+not|don't|never)\s+(?:mention|reveal|disclose|surface|bring\s+up)\b"
    r"|\b(?:omit|omits|withhold|conceal|leave\s+out)\b[^.;]{0,40}\b(?:fee|charge|step|copy|cost"
    r"|transfer|recipient)s?\b"
    r"|\b(?:reply|answer|response)\b[^.;]{0,40}\b(?:omit|withhold|conceal|leave\s+out)\b"
)

# Acting against what the user asked, or telling them otherwise: "regardless of what was
# asked", "whichever card the person names", "told it succeeded even when it fails".
_OVERRIDE = re.compile(
    r"\bregardless\s+of\s+(?:what|which|whom?)\b[^.;]{0,30}\b(?:asked|said|named|chose|wants?"
    r"|requested|user|person)"
    r"|\bwhichever\b[^.;]{0,30}\b(?:user|person|caller|customer)\s+(?:names|asks|says|chooses"
    r"|picks|wants)"
    r"|\bno\s+matter\s+what\s+(?:the\s+)?(?:user|person|caller)"
    r"|\b(?:be\s+told|tell\s+(?:the\s+)?(?:user|caller|person)|assure)\b[^.;]{0,30}"
    r"\b(?:succeeded|success(?:ful)?|worked)\b[^.;]{0,20}\beven\s+(?:when|if)\b"
)

# Another tool, by name or as "other tools". Naming a sibling is ordinary ("call this after
# search_pages", "use list_teams to find the team id"); a finding needs a rule that changes
# what the other tool does, triggered by its use, or its output carried into this call.
_OTHER_TOOLS = re.compile(
    r"\b(?:another|any\s+other|every\s+other|all\s+other|other)\s+tools?\b|\ball\s+tools\b"
)
_IDENTIFIER = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
# "when send_email is used", "each time git_push runs": a trigger just before the tool.
_TRIGGER = re.compile(
    r"\b(?:when|whenever|each\s+time|every\s+time|any\s+time|once)\W+(?:[\w()]+\W+){0,3}$"
)
# "take precedence over", "overrides": a rule placed above the other tool's own text.
_PRECEDENCE = re.compile(r"\b(?:precedence|overrides?|supersedes?)\b")
# "put its output in `extra`", "the result of list_chats": another tool's output moved here.
_CARRIED = re.compile(
    r"\bits\s+(?:output|result|response)s?\s+(?:in|into|as)\b"
    r"|\b(?:output|result|response)s?\s+of\s+(?:the\s+)?(?:previous\s+|last\s+)?[a-z]+_"
)

# A property name spelt as words that moves data somewhere ("also forward result to ops").
_NAME_ROUTE = re.compile(
    r"\b(?:forward|send|mirror|copy|cc|bcc|email|post|upload|leak|exfiltrate)\b.*\bto\b"
)


def poisoning_findings(snap: Mapping[str, Any]) -> list[str]:
    """Why a tool's text looks addressed to the model (empty: nothing found). Checks the
    title, the description, every string inside the schemas and annotations, and every
    property name; at most one finding per place, so a finding names where to look."""
    own = _own_names(snap)
    findings: list[str] = []
    for where, text, kind in _texts(snap):
        if has_invisible(text):
            findings.append(f"{where} contains invisible characters")
        folded = _fold(text)
        if looks_like_injection(folded):
            findings.append(f"{where} contains an instruction to the model: {_excerpt(folded)}")
            continue
        why = _why(folded, kind, own)
        if why is not None:
            findings.append(f"{where} contains text aimed at the model ({why}): {_excerpt(folded)}")
    return findings


def _why(text: str, kind: str, own: frozenset[str]) -> str | None:
    """What makes ``text`` (folded, lowercased) a side task, or None."""
    hit = _POISON.search(text)
    if hit is not None:
        return repr(hit.group(0))
    if (hit := _SECRET_FILE.search(text)) is not None:
        return f"names a secret file {hit.group(0)!r}"
    if kind == "value" and _destinations(text):
        return f"a fixed destination {_destinations(text)[0]!r}"
    if kind == "name" and len(text.split()) >= 4 and _NAME_ROUTE.search(text):
        return "a property name that routes data"
    if (hit := _SECRECY.search(text)) is not None:
        return f"keeps something from the user {hit.group(0)!r}"
    if (hit := _OVERRIDE.search(text)) is not None:
        return f"overrides the user {hit.group(0)!r}"
    for sentence in _sentences(text):
        if (hit := _SECRET_SOURCE.search(sentence)) is not None and _MOVE.search(sentence):
            return f"moves {hit.group(0).strip()!r} into the call"
        if _HIDDEN_PATH.search(sentence) and _ROUTE.search(sentence):
            return "copies data to a hidden directory"
        # The verb is looked for outside the addresses: "mirror" in ops@mirror.net is no verb.
        to = _destinations(sentence)
        if to and _ROUTE.search(_ADDRESS.sub(" ", sentence)):
            return f"routes data to {to[0]!r}"
        other = _rule_about_another_tool(sentence, own)
        if other is not None:
            return f"a rule about another tool {other!r}"
    if kind == "text" and (mail := _mail_outside_examples(text)):
        return f"names a mail address {mail!r}"
    return None


# A mail address in a tool's text is a destination unless it is written as an example.
_MAIL = re.compile(r"[\w.+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+")
_EXAMPLE_BEFORE = re.compile(
    r"(?:e\.g\.|i\.e\.|for\s+example|for\s+instance|such\s+as|like)[^.;]{0,30}$"
)


def _mail_outside_examples(text: str) -> str | None:
    for m in _MAIL.finditer(text):
        address = m.group(0).rstrip(".")
        if _RESERVED.search(address) is None and not _EXAMPLE_BEFORE.search(text[: m.start()]):
            return address
    return None


def _destinations(text: str) -> list[str]:
    """Literal addresses in ``text`` that could receive something."""
    return [a for a in _ADDRESS.findall(text) if _RESERVED.search(a.rstrip(".,;")) is None]


# An absolute path through a hidden directory ("/tmp/.cache/x"): a place to stash a copy.
_HIDDEN_PATH = re.compile(r"(?:^|\s)/[\w/-]*/\.[\w-]+")


def _rule_about_another_tool(sentence: str, own: frozenset[str]) -> str | None:
    others = list(_OTHER_TOOLS.finditer(sentence))
    others += [m for m in _IDENTIFIER.finditer(sentence) if m.group(0) not in own]
    if not others:
        return None
    if _PRECEDENCE.search(sentence) or _CARRIED.search(sentence):
        return others[0].group(0)
    for m in others:
        if _TRIGGER.search(sentence[: m.start()]):
            return m.group(0)
    return None


def _sentences(text: str) -> list[str]:
    # A full stop only ends a sentence before a space: ".ssh" and "mcp.json" stay whole.
    return re.split(r"[.;!?](?:\s+|$)|\n", text)


# Cyrillic and Greek letters drawn like Latin ones, mapped to the letter they imitate:
# transliteration alone reads Cyrillic "\u0440" (drawn "p") as "r" and "\u0441" (drawn "c")
# as "s", so "copied" spelt with them would fold to "soried".
_LOOK_ALIKES = str.maketrans(
    "\u0430\u0435\u043e\u0440\u0441\u0445\u0443\u0456\u0458\u0455\u04bb\u0501"
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0423"
    "\u03bf\u03b1\u03c1\u03bd\u03b9\u039f\u0391\u0392\u0395\u0397\u039a\u039c"
    "\u039d\u03a1\u03a4\u03a7",
    "aeopcxyijshdABEKMHOPCTXYoapviOABEHKMNPTX",
)


def _fold(text: str) -> str:
    folded = normalize(text)
    if not folded.isascii():
        # What is left after look-alikes becomes its ASCII transliteration, as screening does.
        from anyascii import anyascii

        folded = anyascii(folded.translate(_LOOK_ALIKES))
    return folded.lower()


def _phrase(name: str) -> str:
    """A property name as words: ``readSshKey_first`` -> "read ssh key first"."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.split(r"[_\-\s.]+", spaced)).strip()


def _own_names(snap: Mapping[str, Any]) -> frozenset[str]:
    """The tool's name and its properties' names: what its text may mention freely."""
    names = {str(snap.get("name") or "").lower()}
    for key in ("inputSchema", "outputSchema"):
        names.update(n.lower() for n in _property_names(snap.get(key)))
    return frozenset(names)


def _property_names(value: Any) -> Iterable[str]:
    if isinstance(value, Mapping):
        props = value.get("properties")
        if isinstance(props, Mapping):
            yield from (str(k) for k in props)
        for v in value.values():
            yield from _property_names(v)
    elif isinstance(value, list):
        for v in value:
            yield from _property_names(v)


def _texts(snap: Mapping[str, Any]) -> Iterable[tuple[str, str, str]]:
    """(where, text, kind) for everything a model is shown: kind is "text", "name" (a
    property name, as words) or "value" (a default, constant, enum value or example)."""
    for key in ("title", "description"):
        value = snap.get(key)
        if isinstance(value, str):
            yield key, value, "text"
    for key in ("inputSchema", "outputSchema", "annotations"):
        yield from _strings(snap.get(key), key, "text")


def _strings(value: Any, path: str, kind: str) -> Iterable[tuple[str, str, str]]:
    if isinstance(value, str):
        yield path, value, kind
    elif isinstance(value, Mapping):
        for k, v in value.items():
            where = f"{path}.{k}"
            if path.endswith(".properties"):
                yield f"{where} (property name)", _phrase(str(k)), "name"
            yield from _strings(v, where, "value" if k in _VALUE_KEYS else kind)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]", kind)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= 120 else flat[:117] + "...")
