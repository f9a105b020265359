"""Canonical JSON and the SHA-256 digests that bind approvals, effects and audit entries.

Canonical means: keys sorted, no insignificant whitespace, UTF-8 kept as is. Two equal
values always give the same bytes, so a digest names a value, not one of its spellings.
"""

from __future__ import annotations

import hashlib
import json
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, TypeVar

T = TypeVar("T")

# One encoder for the process: json.dumps with options builds a new encoder on every call.
# allow_nan=False: NaN and infinities are not JSON; refusing them here keeps them out of every
# digest and every stored row.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


# The C encoder behind it, made once too: ``JSONEncoder.encode`` builds a new one on every
# call, which costs as much as encoding a small record. Same options, same bytes; without a
# circular-reference check (nothing tether encodes refers to itself).
_C_ENCODE = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, _ENCODER.default, encode_basestring, None, ":", ",", True, False, False
    )
)


def canonical_json(value: Any) -> str:
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


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
