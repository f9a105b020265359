"""A model turn as the runner handles it: whether a reply is one, how it is stored, which
calls of the last turn are still unanswered, and how a call's arguments and errors are shown
to the model and in a run's steps (secrets masked)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tether.core.digest import canonical_json
from tether.core.screening import redact, scrub, secret_values
from tether.models import Message, ModelToolCall
from tether.tools.limits import argument_problems

if TYPE_CHECKING:
    from tether.gate.pipeline import Gate


# -- what a tool call's answer is ------------------------------------------------------------
@dataclass(frozen=True)
class Answered:
    """The call has its tool message (a result, or an error the model is told about)."""

    message: Message


@dataclass(frozen=True)
class Waiting:
    """The call waits for a human to decide approval ``approval_id``."""

    approval_id: str


@dataclass(frozen=True)
class Unsettled:
    """The call's effect has an unknown outcome: the run waits until it is reconciled."""

    operation_key: str


Answer = Answered | Waiting | Unsettled


def not_a_reply(reply: Any) -> str | None:
    """What is wrong with a model's reply, if it is not an assistant message."""
    if not isinstance(reply, Message):
        return f"returned a {type(reply).__name__}, not a Message"
    if not isinstance(reply.content, str):
        return f"returned content of type {type(reply.content).__name__}, not text"
    if not all(isinstance(tc, ModelToolCall) for tc in reply.tool_calls):
        return "returned tool calls that are not ModelToolCall values"
    ids = [tc.id for tc in reply.tool_calls]
    if not all(isinstance(i, str) and i for i in ids) or len(set(ids)) != len(ids):
        return "returned tool calls without distinct ids"
    return None


def storable(reply: Message) -> Message:
    """The model's reply as it can be stored: a call whose arguments no JSON can hold
    (thousands of levels deep, NaN, non-string keys) keeps its id and name but carries the
    problem as a parse error, which the model is answered with, instead of arguments that
    would break the write of the conversation itself."""
    if reply.role != "assistant":
        reply = replace(reply, role="assistant")
    if not any(argument_problems(tc.arguments) for tc in reply.tool_calls):
        return reply
    calls = []
    for tc in reply.tool_calls:
        problems = argument_problems(tc.arguments)
        error = "; ".join(problems)[:500]
        calls.append(ModelToolCall(id=tc.id, name=tc.name, parse_error=error) if problems else tc)
    return replace(reply, tool_calls=tuple(calls))


class Shown:
    """A call's arguments as a run's steps may show them: sensitive fields and
    credential-looking values masked (steps are printed by `tether runs show`)."""

    def __init__(self, gate: Gate, tool: str, arguments: Mapping[str, Any]) -> None:
        known = gate.registry.find(tool)
        fields = known.manifest.sensitive_fields if known is not None else frozenset()
        try:
            self.arguments = canonical_json(redact(dict(arguments), fields)[0])
            self.secrets = secret_values(arguments, fields)
        except (ValueError, TypeError, RecursionError):
            # Arguments that are not JSON at all: the gate refuses them; show nothing.
            self.arguments, self.secrets = "(arguments that are not JSON)", []

    def scrub(self, text: str) -> str:
        return str(redact(scrub(text, self.secrets))[0])


def open_turn(messages: list[Message]) -> Message | None:
    """The last model turn, if some of its tool calls have no answer yet."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            answered = {m.tool_call_id for m in messages[i + 1 :] if m.role == "tool"}
            if any(tc.id not in answered for tc in messages[i].tool_calls):
                return messages[i]
            return None
    return None


def tool_error(tc: ModelToolCall, error: str, **extra: Any) -> Message:
    body = {"error": error, "tool": tc.name, **{k: v for k, v in extra.items() if v is not None}}
    return Message(role="tool", content=json.dumps(body, ensure_ascii=False), tool_call_id=tc.id)
