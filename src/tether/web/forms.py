"""The edit form, made from the tool's JSON Schema, and the form read back into arguments.

One field per top-level property: strings, numbers, integers and booleans get the matching
input with the schema's limits as HTML constraints (so the browser refuses an obviously bad
value before it is sent), enums a select, and anything else (objects, arrays, unions) a JSON
text area. The browser's checks are a convenience: the edit is validated against the schema,
and judged by the policy, on the server (``tether.gate.desk.edit_approval``).

A masked (sensitive) argument is never put in the page: its field starts empty, and left
empty it keeps the value the call already had.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

JSON_KIND = "json"


@dataclass(frozen=True)
class FormField:
    name: str
    kind: str  # text, number, integer, checkbox, select, json
    value: str
    required: bool
    masked: bool = False
    checked: bool = False
    description: str = ""
    options: tuple[tuple[str, str], ...] = ()  # (value sent, label shown)
    attrs: dict[str, str] = field(default_factory=dict)  # HTML constraint attributes


def _kind(spec: Mapping[str, Any]) -> str:
    if "enum" in spec:
        return "select"
    t = spec.get("type")
    if t in ("string", "number", "integer"):
        return "text" if t == "string" else t
    if t == "boolean":
        return "checkbox"
    return JSON_KIND


def _attrs(kind: str, spec: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    if kind == "text":
        for key, attr in (("minLength", "minlength"), ("maxLength", "maxlength")):
            if isinstance(spec.get(key), int):
                out[attr] = str(spec[key])
    if kind in ("number", "integer"):
        for key, attr in (("minimum", "min"), ("maximum", "max")):
            if isinstance(spec.get(key), int | float):
                out[attr] = str(spec[key])
        out["step"] = "1" if kind == "integer" else "any"
    return out


def form_fields(
    schema: Mapping[str, Any], arguments: Mapping[str, Any], masked: frozenset[str]
) -> list[FormField]:
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    names = list(properties) + [n for n in arguments if n not in properties]
    fields = []
    for name in names:
        spec = properties.get(name) or {}
        kind = _kind(spec) if isinstance(spec, Mapping) else JSON_KIND
        current = arguments.get(name)
        hidden = name in masked
        if hidden or current is None:
            value = ""
        elif kind in (JSON_KIND, "select"):
            value = json.dumps(current, ensure_ascii=False)
        else:
            value = str(current)
        options: tuple[tuple[str, str], ...] = ()
        if kind == "select":
            options = tuple(
                (json.dumps(v, ensure_ascii=False), str(v)) for v in spec.get("enum", [])
            )
        fields.append(
            FormField(
                name=name,
                kind=kind,
                value=value,
                # A masked field left empty keeps its value, so the browser must allow empty.
                required=name in required and not hidden,
                masked=hidden,
                checked=bool(current) if kind == "checkbox" else False,
                description=str(spec.get("description", "")) if isinstance(spec, Mapping) else "",
                options=options,
                attrs=_attrs(kind, spec) if isinstance(spec, Mapping) else {},
            )
        )
    return fields


def read_form(
    fields: list[FormField], form: Mapping[str, str], original: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The arguments the form says, and what could not be read (each as a sentence)."""
    arguments: dict[str, Any] = {}
    problems: list[str] = []
    for f in fields:
        key = f"arg.{f.name}"
        if f.kind == "checkbox":
            arguments[f.name] = key in form
            continue
        raw = form.get(key, "")
        if raw == "":
            if f.masked and f.name in original:
                arguments[f.name] = original[f.name]
            elif f.required:
                problems.append(f"'{f.name}' is required")
            continue
        try:
            if f.kind == "integer":
                arguments[f.name] = int(raw)
            elif f.kind == "number":
                number = float(raw)
                arguments[f.name] = (
                    int(number) if number.is_integer() and "." not in raw else number
                )
            elif f.kind in ("select", JSON_KIND):
                arguments[f.name] = json.loads(raw)
            else:
                arguments[f.name] = raw
        except ValueError:
            what = {"integer": "a whole number", "number": "a number"}.get(f.kind, "JSON")
            problems.append(f"'{f.name}' must be {what}")
    return arguments, problems


def refill(f: FormField, form: Mapping[str, str]) -> FormField:
    """``f`` showing what was submitted (after a refused edit), except a masked value."""
    key = f"arg.{f.name}"
    if f.masked:
        return f
    if f.kind == "checkbox":
        return replace(f, checked=key in form)
    return replace(f, value=form.get(key, ""))
