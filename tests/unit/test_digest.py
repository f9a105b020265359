"""Canonical JSON is json.dumps with tether's options, byte for byte, however it is made."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.core.digest import canonical_json

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


def _reference(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


@given(json_values)
def test_canonical_json_is_json_dumps_with_sorted_keys(value: Any) -> None:
    assert canonical_json(value) == _reference(value)


@pytest.mark.parametrize("value", [float("nan"), {"a": float("inf")}, [float("-inf")]])
def test_nan_and_infinities_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        canonical_json(value)


def test_a_value_that_is_not_json_is_refused_by_type() -> None:
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        canonical_json({"a": {1, 2}})


def test_a_cycle_is_a_value_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="circular"):
        canonical_json({"a": loop})
    assert canonical_json({"after": [1]}) == '{"after":[1]}'  # and the encoder still works


def test_one_encoder_serves_threads_at_once() -> None:
    shared = {"k": [{"x": i} for i in range(200)]}
    expected = _reference(shared)
    seen: list[str] = []

    def encode() -> None:
        seen.extend(canonical_json(shared) for _ in range(200))

    threads = [threading.Thread(target=encode) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(seen) == {expected}
