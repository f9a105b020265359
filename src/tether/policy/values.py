"""JSON-like values as the provenance index reads them: their leaves (with the key each sits
under), the fields at a path, their whole-value tokens, and who a readers field names."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from tether.policy.destinations import STRIP, fold, parse_address
from tether.policy.tokens import id_like, scalar_token

SHORT_VALUE = 64  # string leaves up to this length are also indexed whole


def normal_value(value: Any) -> str:
    """A value as the index keys it whole: casefolded, whitespace collapsed, numbers plain."""
    kind = type(value)
    # An exact int or float prints as a sign, digits, a point, an exponent or inf/nan, all
    # lowercase ASCII: no space to collapse, nothing to fold, nothing of ``_TRAILING``.
    if kind is int:
        return str(value)
    if kind is float:
        return str(int(value)) if value.is_integer() else str(value)
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


# A leaf as the index reads an output: (the record it is in — the item of a list result, or
# 0 — the path of keys to it from its record, the nearest key, the leaf).
Row = tuple[int, tuple[str, ...], str, Any]


def rows(value: Any) -> list[Row]:
    """Every leaf of a result with where it sits, in one walk (``leaves`` with paths)."""
    out: list[Row] = []
    for n, item in enumerate(value if isinstance(value, list) else [value]):
        _rows(item, n, (), "", out)
    return out


def _rows(value: Any, n: int, path: tuple[str, ...], key: str, out: list[Row]) -> None:
    kind = type(value)
    if kind in _SCALARS:
        out.append((n, path, key, value))
    elif kind is dict or isinstance(value, Mapping):
        for raw, item in value.items():
            name = raw if type(raw) is str else str(raw)
            if not name.replace("_", "").isalpha():
                out.append((n, path, key, name))
            _rows(item, n, (*path, name), name, out)
    elif kind is list or isinstance(value, list | tuple):
        for item in value:
            _rows(item, n, path, key, out)
    elif value is not None:
        out.append((n, path, key, value))


def parse_paths(paths: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(p.split(".")) for p in paths)


def under(path: tuple[str, ...], paths: tuple[tuple[str, ...], ...]) -> bool:
    """Whether a leaf's path is at or below one of ``paths``."""
    for p in paths:  # noqa: SIM110 - a loop is faster than any() here, per leaf
        if path[: len(p)] == p:
            return True
    return False


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
        elif type(leaf) is int or type(leaf) is float:
            text, number = _number(leaf, id_like(key))
            texts.append(text)
            whole.append(number)
        else:
            texts.append(normal_value(leaf))
            token = scalar_token(key, leaf)
            if token is not None:
                whole.append(token)
    return texts, whole


@lru_cache(maxsize=8192, typed=True)
def _number(value: float, is_id: bool) -> tuple[str, str]:
    """A number leaf's text and token, remembered: records repeat their ids and amounts. A
    number's token depends on its key only through ``id_like``, which ``is_id`` carries."""
    token = scalar_token("id" if is_id else "", value)
    assert token is not None  # a number is never None or a boolean
    return normal_value(value), token


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


def records(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


_DIGIT = re.compile(r"\d")


def has_digit(value: Any) -> bool:
    """Whether any leaf of ``value`` has a digit in it (every private word does)."""
    if type(value) is str:
        return _DIGIT.search(value) is not None
    return any(_DIGIT.search(str(leaf)) for _, leaf in leaves(value))
