"""A tool's argument check: a fast proof of validity in front of jsonschema, never instead of it.

``jsonschema`` re-creates a validator object for every subschema it descends into, which makes
checking even ``{"ticket_id": "T-1"}`` cost more than the rest of a call's judging. Most tool
schemas (those pydantic writes for a typed function) use a handful of keywords, so
``compile_schema`` turns a schema made only of those into a predicate that answers one
question: is this instance *certainly* valid? ``True`` is a proof; ``False`` means "invalid, or
not sure" and the caller asks jsonschema, which has the last word and writes the error
messages. A schema with any other keyword (``$ref``, ``oneOf``, ``patternProperties``...)
is not compiled at all. So the predicate may only ever be stricter than jsonschema: every
check below accepts a subset of what the keyword's jsonschema implementation accepts
(tests/unit/test_validation.py compares the two on generated instances).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sized
from typing import Any, cast

Check = Callable[[Any], bool]

# Keywords that never make an instance invalid. ``format`` is one: the gate's validator has
# no format checker, as jsonschema's default is, so a format is an annotation only.
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "format", "deprecated"}
    | {"readOnly", "writeOnly", "contentEncoding", "contentMediaType"}
)

# Exactly these types and no subclass of them (a ``bool`` is not an int here, a str subclass
# is "not sure"): what ``json.loads`` makes, and what jsonschema's type checker accepts for
# each name, narrowed.
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "array": (list,),
    "object": (dict,),
}
_JSON_TYPES = frozenset(t for ts in _TYPES.values() for t in ts)


class _Unsupported(Exception):
    """The schema uses something this module does not prove; jsonschema alone checks it."""


def compile_schema(schema: Any) -> Check | None:
    """A predicate that returns True only for instances ``schema`` certainly accepts, or
    None if the schema uses a keyword outside the subset proved here."""
    try:
        return _compile(schema)
    except _Unsupported:
        return None


def _compile(schema: Any) -> Check:
    if schema is True:
        return _always
    if schema is False or not isinstance(schema, Mapping):
        raise _Unsupported
    checks: list[Check] = []
    handled = set(_ANNOTATIONS)
    for keyword, build in _KEYWORDS.items():
        if keyword in schema:
            handled.add(keyword)
            check = build(schema)
            if check is not None:
                checks.append(check)
    if not handled.issuperset(schema):
        raise _Unsupported
    return _all_of(checks)


def _always(_: Any) -> bool:
    return True


def _all_of(checks: list[Check]) -> Check:
    if len(checks) == 1:
        only = checks[0]

        def one(x: Any) -> bool:
            return type(x) in _JSON_TYPES and only(x)

        return one

    def every(x: Any) -> bool:
        if type(x) not in _JSON_TYPES:
            return False
        for check in checks:  # noqa: SIM110 - a loop is faster here than all() over a generator
            if not check(x):
                return False
        return True

    return every


def _type(schema: Mapping[str, Any]) -> Check:
    names = schema["type"]
    names = [names] if isinstance(names, str) else list(names)
    if not names or any(not isinstance(n, str) or n not in _TYPES for n in names):
        raise _Unsupported
    allowed = frozenset(t for n in names for t in _TYPES[n])
    return lambda x: type(x) in allowed


def _properties(schema: Mapping[str, Any]) -> Check:
    if "patternProperties" in schema:
        raise _Unsupported  # it changes what additionalProperties covers
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise _Unsupported
    subs = [(name, _compile(sub)) for name, sub in properties.items() if sub is not True]
    extra = schema.get("additionalProperties", True)
    known = frozenset(properties)
    extra_check = None if extra is True or extra is False else _compile(extra)

    def check(x: Any) -> bool:
        if type(x) is not dict:
            return True  # jsonschema applies these keywords to objects only
        for name, sub in subs:
            if name in x and not sub(x[name]):
                return False
        if extra is True:
            return True
        if extra is False:
            return known.issuperset(x)
        assert extra_check is not None
        return all(extra_check(v) for k, v in x.items() if k not in known)

    return check


def _required(schema: Mapping[str, Any]) -> Check:
    names = tuple(schema["required"])
    return lambda x: type(x) is not dict or all(n in x for n in names)


def _items(schema: Mapping[str, Any]) -> Check:
    if "prefixItems" in schema:
        raise _Unsupported
    sub = _compile(schema["items"])
    return lambda x: type(x) is not list or all(sub(item) for item in x)


def _length(keyword: str, kind: type, smallest: bool) -> Callable[[Mapping[str, Any]], Check]:
    def build(schema: Mapping[str, Any]) -> Check:
        bound = schema[keyword]
        if type(bound) is not int:
            raise _Unsupported
        if smallest:
            return lambda x: type(x) is not kind or len(cast(Sized, x)) >= bound
        return lambda x: type(x) is not kind or len(cast(Sized, x)) <= bound

    return build


def _bound(keyword: str) -> Callable[[Mapping[str, Any]], Check]:
    compare: dict[str, Callable[[Any, Any], bool]] = {
        "minimum": lambda x, b: x >= b,
        "maximum": lambda x, b: x <= b,
        "exclusiveMinimum": lambda x, b: x > b,
        "exclusiveMaximum": lambda x, b: x < b,
    }
    ok = compare[keyword]

    def build(schema: Mapping[str, Any]) -> Check:
        bound = schema[keyword]
        if type(bound) not in (int, float):
            raise _Unsupported
        # A NaN compares false with everything, so it is "not sure", never "valid".
        return lambda x: type(x) not in (int, float) or ok(x, bound)

    return build


def _pattern(schema: Mapping[str, Any]) -> Check:
    pattern = schema["pattern"]
    if not isinstance(pattern, str):
        raise _Unsupported
    try:
        search = re.compile(pattern).search  # jsonschema's own test: re.search
    except re.error:
        raise _Unsupported from None
    return lambda x: type(x) is not str or search(x) is not None


def _enum(schema: Mapping[str, Any]) -> Check:
    # Only strings and null are proved (jsonschema compares a string to a string with ==);
    # numbers, where it tells True from 1 but not 1 from 1.0, are left to it.
    values = schema["enum"]
    if not isinstance(values, list):
        raise _Unsupported
    strings = frozenset(v for v in values if type(v) is str)
    null = any(v is None for v in values)
    return lambda x: (type(x) is str and x in strings) or (x is None and null)


def _const(schema: Mapping[str, Any]) -> Check:
    value = schema["const"]
    if value is None:
        return lambda x: x is None
    if type(value) is str:
        return lambda x: type(x) is str and x == value
    return lambda x: False  # not proved here; jsonschema decides


def _any_of(schema: Mapping[str, Any]) -> Check:
    branches = schema["anyOf"]
    if not isinstance(branches, list) or not branches:
        raise _Unsupported
    subs = [_compile(b) for b in branches]
    return lambda x: any(sub(x) for sub in subs)


def _all_of_keyword(schema: Mapping[str, Any]) -> Check:
    branches = schema["allOf"]
    if not isinstance(branches, list) or not branches:
        raise _Unsupported
    subs = [_compile(b) for b in branches]
    return lambda x: all(sub(x) for sub in subs)


# The keywords proved here, and how each becomes a check. ``properties`` also covers
# ``additionalProperties``; a schema with only the latter gets an empty ``properties``.
_KEYWORDS: dict[str, Callable[[Mapping[str, Any]], Check | None]] = {
    "type": _type,
    "properties": _properties,
    "additionalProperties": lambda s: None if "properties" in s else _properties(s),
    "required": _required,
    "items": _items,
    "minLength": _length("minLength", str, True),
    "maxLength": _length("maxLength", str, False),
    "minItems": _length("minItems", list, True),
    "maxItems": _length("maxItems", list, False),
    "minProperties": _length("minProperties", dict, True),
    "maxProperties": _length("maxProperties", dict, False),
    "minimum": _bound("minimum"),
    "maximum": _bound("maximum"),
    "exclusiveMinimum": _bound("exclusiveMinimum"),
    "exclusiveMaximum": _bound("exclusiveMaximum"),
    "pattern": _pattern,
    "enum": _enum,
    "const": _const,
    "anyOf": _any_of,
    "allOf": _all_of_keyword,
}
