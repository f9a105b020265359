"""JSON-like values as the provenance index reads them: their leaves (with the key each sits
under), the fields at a path, their whole-value tokens, and who a readers field names."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from tether.policy.destinations import STRIP, fold, parse_address
from tether.policy.tokens import scalar_token

SHORT_VALUE = 64  # string leaves up to this length are also indexed whole


def normal_value(value: Any) -> str:
    """A value as the index keys it whole: casefolded, whitespace collapsed, numbers plain."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return " ".join(str(value).split()).casefold().strip(_TRAILING + " ")


_TRAILING = ".,;:!?)]}'\""
_SCALARS = (str, int, float, bool)


def leaves(value: Any, key: str = "") -> list[tuple[str, Any]]:
    """(the nearest key, the leaf) for every scalar in a JSON-like value, in order; a
    dictionary key that could hold an identifier is a leaf too (under its parent's key), so
    an address used as a key is indexed and checked like any value."""
    out: list[tuple[str, Any]] = []
    _walk(value, key, out)
    return out


def _walk(value: Any, key: str, out: list[tuple[str, Any]]) -> None:
    kind = type(value)
    if kind in _SCALARS:  # exact types first: the common case, and the cheapest test
        out.append((key, value))
    elif kind is dict or isinstance(value, Mapping):
        for raw, item in value.items():
            name = raw if type(raw) is str else str(raw)
            if not name.replace("_", "").isalpha():
                out.append((key, name))
            _walk(item, name, out)
    elif kind is list or isinstance(value, list | tuple):
        for item in value:
            _walk(item, key, out)
    elif value is not None:
        out.append((key, value))


def _at(record: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of a record, or None."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def split_fields(value: Any, paths: frozenset[str]) -> tuple[list[Any], Any]:
    """The values at ``paths`` (dotted, from the top of the result or of each record of a
    list result), and the result without them. A path names one place: ``id`` is the
    top-level key, never an ``id`` nested deeper."""
    if isinstance(value, list):
        found: list[Any] = []
        rest: list[Any] = []
        for item in value:
            f, r = split_fields(item, paths)
            found.extend(f)
            rest.append(r)
        return found, rest
    if not isinstance(value, Mapping):
        return [], value
    found = []
    rest_map: dict[str, Any] = {}
    for name, item in value.items():
        inner = frozenset(p.split(".", 1)[1] for p in paths if p.startswith(f"{name}."))
        if name in paths:
            found.append(item)
        elif inner:
            f, r = split_fields(item, inner)
            found.extend(f)
            rest_map[name] = r
        else:
            rest_map[name] = item
    return found, rest_map


# Leaves are scanned as one text (one pass instead of one per leaf); the separator is not
# part of any identifier and ends a run of numbers, so no token spans two leaves.
JOIN = " | "


def texts_of(leaves: list[tuple[str, Any]]) -> tuple[list[str], list[str]]:
    """The leaves as text, and the whole-value tokens of the short ones (typed by key)."""
    texts: list[str] = []
    whole: list[str] = []
    for key, leaf in leaves:
        if type(leaf) is str:
            texts.append(leaf)
            if len(leaf) <= SHORT_VALUE:
                token = scalar_token(key, leaf)
                if token:
                    whole.append(token)
        else:
            texts.append(normal_value(leaf))
            token = scalar_token(key, leaf)
            if token is not None:
                whole.append(token)
    return texts, whole


@lru_cache(maxsize=8192)
def reader(value: str) -> str:
    """Who a readers field or a destination names, as the two are compared."""
    text = normal_value(value)
    address = parse_address(fold(text).strip(STRIP))
    return address[0] if address is not None else text


def destinations(value: Any) -> set[str]:
    """Who an audience argument names: its addresses, or its values whole (a user name, a
    channel)."""
    found: set[str] = set()
    for _, leaf in leaves(value):
        if isinstance(leaf, str) and leaf.strip():
            found.add(reader(leaf))
    return found


def readers_of(value: Any, paths: tuple[str, ...]) -> frozenset[str]:
    """The readers a private record names at ``paths``."""
    if not isinstance(value, Mapping):
        return frozenset()
    found: set[str] = set()
    for path in paths:
        for _, leaf in leaves(_at(value, path)):
            if isinstance(leaf, str) and leaf.strip():
                found.add(reader(leaf))
    return frozenset(found)


def records(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]
