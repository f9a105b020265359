"""The model side of a run: messages, the calls a model proposes, and the ``Model`` protocol.

Adapters for real providers live beside this module; the ``ScriptedModel`` ships in the
library so tests and demos drive agents without a network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from tether.tools.registry import ToolSpec

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, kw_only=True)
class ModelToolCall:
    """A call the model proposes. ``parse_error`` is set when the model's arguments were not
    valid JSON: the run answers the model with that error instead of calling anything."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    parse_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}
        if self.parse_error is not None:
            data["parse_error"] = self.parse_error
        return data


@dataclass(frozen=True, kw_only=True)
class Message:
    """One message of a run's conversation: user, assistant (maybe with tool calls),
    system, or a tool's answer to one call."""

    role: Role
    content: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [tc.to_dict() for tc in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            tool_calls=tuple(
                ModelToolCall(
                    id=tc["id"],
                    name=tc["name"],
                    arguments=tc.get("arguments", {}),
                    parse_error=tc.get("parse_error"),
                )
                for tc in data.get("tool_calls", ())
            ),
            tool_call_id=data.get("tool_call_id"),
        )


class Model(Protocol):
    """Anything that answers a conversation with a message, possibly proposing tool calls.

    ``tools`` are the registry's ``tool_specs()``; each adapter formats them for its
    provider."""

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message: ...


__all__ = ["Message", "Model", "ModelToolCall", "Role"]
