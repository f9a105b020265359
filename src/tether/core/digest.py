"""Canonical JSON and the SHA-256 digests that bind approvals, effects and audit entries.

Canonical means: keys sorted, no insignificant whitespace, UTF-8 kept as is. Two equal
values always give the same bytes, so a digest names a value, not one of its spellings.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

T = TypeVar("T")

# allow_nan=False: NaN and infinities are not JSON; refusing them here keeps them out of every
# digest and every stored row.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _unencodable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The C encoder, made once. ``JSONEncoder.encode`` builds one (and a closure, and a dict for
# cycle detection) on every call, which is half the cost of encoding a small value; canonical
# JSON is made a dozen times per gate call. Without the cycle-detection dict the encoder is
# stateless, so one serves every thread; a cycle then ends in RecursionError, turned below
# into the ValueError json raises.
_c_make_encoder = cast(Callable[..., Any] | None, getattr(json.encoder, "c_make_encoder", None))
_C_ENCODE: Callable[[Any, int], Iterable[str]] | None = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None,  # markers: no cycle detection
        _unencodable,
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
)


def canonical_json(value: Any) -> str:
    if _C_ENCODE is None:  # an interpreter without the C accelerator
        return _ENCODER.encode(value)
    try:
        return "".join(_C_ENCODE(value, 0))
    except RecursionError:
        raise ValueError("circular reference detected, or nested too deeply for JSON") from None


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + sha256_hex(canonical_json(value))


def evolve(record: T, **changes: Any) -> T:
    """A copy of a frozen dataclass with ``changes``, without re-running ``__init__``.

    ``dataclasses.replace`` re-validates every field; on the gate's hot path that costs
    more than the rest of some steps. Use this only where the changed fields cannot break
    an invariant the class's ``__post_init__`` checks (counters going up, a status moving
    along a machine the caller has already checked)."""
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__)
    new.__dict__.update(changes)
    return new
