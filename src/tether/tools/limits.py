"""What a call's arguments may be at all, checked before anything hashes or walks them.

Arguments come from a model, which means from whoever wrote the text it read. Nested a few
thousand levels deep they would blow Python's recursion limit inside the digest, the
redactor or jsonschema; a non-string key cannot be canonical JSON; NaN and ±Infinity are not
JSON and compare false with everything, so ``amount <= 1000`` would let ``-Infinity``
through. This walk is iterative, so it cannot itself be made to recurse too deep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 32
MAX_NODES = 100_000
# Python refuses to print an integer of more than 4,300 digits (int_max_str_digits), so JSON
# cannot hold one; ~14,284 bits is where that starts.
MAX_INT_DIGITS = 4300
MAX_INT_BITS = 14_284


def argument_problems(
    arguments: Any, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES
) -> list[str]:
    """Why ``arguments`` cannot be a call's arguments (empty if they can)."""
    if not isinstance(arguments, Mapping):
        return [f"arguments must be a JSON object, not {type(arguments).__name__}"]
    problems: list[str] = []
    stack: list[tuple[Any, str, int]] = [(arguments, "(arguments)", 0)]
    nodes = 0
    while stack and len(problems) < 5:
        value, where, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            return [f"arguments have more than {max_nodes} values; send less"]
        if depth > max_depth:
            return [f"{where}: nested deeper than {max_depth} levels"]
        kind = type(value)
        if kind is str:
            if not value.isascii() and _not_text(value):
                problems.append(f"{where}: holds a lone surrogate, which is not text")
            continue
        if kind is int:
            if value.bit_length() > MAX_INT_BITS:
                problems.append(f"{where}: an integer of more than {MAX_INT_DIGITS} digits")
            continue
        if kind is bool or value is None:
            continue  # the commonest values, and fine: skip the ABC checks below
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str) or (not key.isascii() and _not_text(key)):
                    problems.append(f"{where}: key {key!r} is not a string of text")
                    continue
                stack.append((item, key if where == "(arguments)" else f"{where}/{key}", depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, float):
            if not math.isfinite(value):
                problems.append(f"{where}: {value} is not a finite number")
        elif value is not None and not isinstance(value, str | int | bool):
            problems.append(f"{where}: a {type(value).__name__} is not a JSON value")
    return problems


def _not_text(value: str) -> bool:
    """Whether ``value`` holds a lone surrogate, which UTF-8 (and so the store) cannot hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
