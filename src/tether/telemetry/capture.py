"""Which tools' argument and result values may enter a span: none unless the operator opts a
tool in, by name (``capture("search_docs")``). Even then they are redacted as the audit log
redacts them (the gate does that, ``tether.gate.traced``)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["capture", "captures"]

_captured: frozenset[str] = frozenset()


def capture(tools: Iterable[str]) -> None:
    """Record the (redacted) arguments and results of these tools in their spans, as
    ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``; an empty list stops."""
    global _captured
    _captured = frozenset(tools)


def captures(tool: str) -> bool:
    return tool in _captured
