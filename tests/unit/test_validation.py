"""The compiled argument check may only ever be stricter than jsonschema, and must be used."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from tether.errors import InvalidArguments
from tether.tools.registry import Manifest, Registry, Tool, schema_from_function
from tether.tools.schema import compile_schema


def _typed(
    ticket_id: str,
    count: Annotated[int, Field(ge=0, le=10)],
    ratio: Annotated[float, Field(gt=0, lt=1)] = 0.5,
    note: str | None = None,
    tags: Annotated[list[str], Field(min_length=1, max_length=3)] = ["a"],  # noqa: B006
    mode: Literal["fast", "slow"] = "fast",
    code: Annotated[str, Field(pattern=r"^[A-Z]-\d+$", min_length=3, max_length=8)] = "A-1",
    extra: dict[str, int] = {},  # noqa: B006
    flag: bool = False,
) -> None:
    """A function using every keyword the compiler proves."""


SCHEMAS: dict[str, dict[str, Any]] = {
    "pydantic": schema_from_function(_typed),
    "bench": {
        "type": "object",
        "properties": {"ticket_id": {"type": "string"}},
        "required": ["ticket_id"],
        "additionalProperties": False,
    },
    "numbers": {
        "type": "object",
        "properties": {
            "n": {"type": ["integer", "null"], "exclusiveMinimum": -1, "maximum": 5},
            "x": {"type": "number", "minimum": 0.5, "exclusiveMaximum": 2},
            "e": {"enum": ["a", "b", 1, None]},
            "c": {"const": "k"},
            "z": {"const": 0},
            "all": {"allOf": [{"type": "string"}, {"minLength": 2}]},
        },
        "minProperties": 1,
        "maxProperties": 4,
    },
    "loose": {"properties": {"a": {"items": {"type": "integer"}, "minItems": 1}}},
    "format": {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}},
}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=12)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-3, max_value=12)
    | st.sampled_from(["", "a", "b", "k", "fast", "slow", "T-1", "A-12", "x" * 9, "ab"])
)
keys = st.sampled_from(
    [
        *("ticket_id", "count", "ratio", "note", "tags", "mode", "code", "extra", "flag"),
        *("n", "x", "e", "c", "z", "all", "a", "email", "other"),
    ]
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=6),
    max_leaves=12,
)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=400, deadline=None)
@given(instance=st.dictionaries(keys, json_values, max_size=8))
def test_a_proof_of_validity_is_never_wrong(name: str, instance: dict[str, Any]) -> None:
    schema = SCHEMAS[name]
    proof = compile_schema(schema)
    assert proof is not None, f"{name} should be compiled"
    if proof(instance):
        assert jsonschema.Draft202012Validator(schema).is_valid(instance), instance


@pytest.mark.parametrize(
    ("name", "instance"),
    [
        ("bench", {"ticket_id": "T-1"}),
        (
            "pydantic",
            {
                "ticket_id": "T-1",
                "count": 3,
                "ratio": 0.25,
                "note": None,
                "tags": ["x", "y"],
                "mode": "slow",
                "code": "B-77",
                "extra": {"k": 1},
                "flag": True,
            },
        ),
        ("pydantic", {"ticket_id": "T-1", "count": 0, "note": "hello"}),
        ("numbers", {"n": 0, "x": 1, "e": "a", "all": "ab"}),
        ("numbers", {"c": "k", "e": None}),
        ("loose", {"a": [1, 2]}),
        ("format", {"email": "not an address"}),  # format is an annotation only
    ],
)
def test_typical_valid_arguments_are_proved_without_jsonschema(
    name: str, instance: dict[str, Any]
) -> None:
    proof = compile_schema(SCHEMAS[name])
    assert proof is not None
    assert proof(instance) is True


@pytest.mark.parametrize(
    "instance",
    [
        {},
        {"ticket_id": 7},
        {"ticket_id": "T-1", "other": 1},
        {"ticket_id": True},
        {"ticket_id": "T-1", "count": True},  # a bool is not an integer
        {"ticket_id": "T-1", "count": 11},
        {"ticket_id": "T-1", "count": 1, "tags": []},
        {"ticket_id": "T-1", "count": 1, "mode": "medium"},
        {"ticket_id": "T-1", "count": 1, "code": "a-1"},
        {"ticket_id": "T-1", "count": 1, "ratio": 1},
        {"ticket_id": "T-1", "count": 1, "extra": {"k": "v"}},
    ],
)
def test_invalid_arguments_are_never_proved(instance: dict[str, Any]) -> None:
    schema = SCHEMAS["bench"] if set(instance) <= {"ticket_id", "other"} else SCHEMAS["pydantic"]
    proof = compile_schema(schema)
    assert proof is not None
    assert not jsonschema.Draft202012Validator(schema).is_valid(instance)
    assert proof(instance) is False


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/x", "$defs": {"x": {"type": "string"}}},
        {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        {"not": {"type": "string"}},
        {"patternProperties": {"^a": {"type": "string"}}, "additionalProperties": False},
        {"type": "array", "prefixItems": [{"type": "string"}], "items": False},
        {"type": "array", "uniqueItems": True},
        {"type": "object", "properties": {"a": {"multipleOf": 2}}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
        {"type": "string", "pattern": "("},
        False,
    ],
)
def test_schemas_outside_the_subset_are_left_to_jsonschema(schema: Any) -> None:
    assert compile_schema(schema) is None


def test_a_tool_checks_what_the_proof_cannot_with_jsonschema() -> None:
    # uniqueItems is not compiled: the tool must still refuse duplicates, with jsonschema's
    # message, and accept unique items.
    manifest = Manifest(
        name="tag",
        parameters={
            "type": "object",
            "properties": {"tags": {"type": "array", "uniqueItems": True}},
            "additionalProperties": False,
        },
    )
    tool = Tool(manifest, lambda tags: tags)
    tool.validate({"tags": ["a", "b"]})
    with pytest.raises(InvalidArguments, match="non-unique"):
        tool.validate({"tags": ["a", "a"]})


def test_refusals_keep_jsonschema_messages() -> None:
    registry = Registry()

    @registry.tool
    def close_ticket(ticket_id: str) -> str:
        return ticket_id

    tool = registry.get("close_ticket")
    tool.validate({"ticket_id": "T-1"})
    with pytest.raises(InvalidArguments) as caught:
        tool.validate({"ticket_id": 7, "force": True})
    assert caught.value.problems == [
        "(arguments): Additional properties are not allowed ('force' was unexpected)",
        "ticket_id: 7 is not of type 'string'",
    ]
