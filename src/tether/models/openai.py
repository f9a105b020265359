"""A ``Model`` backed by the OpenAI Chat Completions API (``pip install -e '.[openai]'``).

Tether messages go out in the Chat Completions wire format and the first choice comes back
as a tether ``Message``. Arguments that are not a JSON object become a ``ModelToolCall``
with ``parse_error`` set, so the run can tell the model instead of calling anything. Every
SDK failure, and any answer that is not a chat completion, is raised as ``ModelError``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

try:
    import openai
except ImportError as e:
    raise ImportError(
        "tether.models.openai needs the openai package: pip install -e '.[openai]'"
    ) from e

from tether.errors import ModelError
from tether.models import Message, ModelToolCall
from tether.models.errors import api_message, hint, retryable_status, short
from tether.tools.registry import ToolSpec

_HINTS = {409: "try again", 422: "check the messages, tools and parameters sent"}


def _parse_arguments(name: str, raw: object) -> tuple[dict[str, Any], str | None]:
    if not isinstance(raw, str):
        return {}, f"arguments for '{name}' must be a JSON string, got {type(raw).__name__}"
    text = raw.strip() or "{}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return {}, f"arguments for '{name}' are not valid JSON ({e.msg} at position {e.pos})"
    if not isinstance(value, dict):
        return {}, f"arguments for '{name}' must be a JSON object, got {type(value).__name__}"
    return value, None


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Tether messages in the Chat Completions ``messages`` format."""
    wire: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            wire.append(
                {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
            )
        elif m.role == "assistant" and m.tool_calls:
            wire.append(
                {
                    "role": "assistant",
                    "content": m.content or None,
                    "tool_calls": [
                        {
                            "id": tc.id,
                            "type": "function",
                            "function": {
                                "name": tc.name,
                                "arguments": json.dumps(dict(tc.arguments), ensure_ascii=False),
                            },
                        }
                        for tc in m.tool_calls
                    ],
                }
            )
        else:
            wire.append({"role": m.role, "content": m.content})
    return wire


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs in the Chat Completions ``tools`` format."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


class OpenAIChatModel:
    """Answers with ``client.chat.completions.create``; ``create_kwargs`` go to every call
    (``temperature=0``, ``max_completion_tokens=...``)."""

    def __init__(
        self, model: str, *, client: openai.OpenAI | None = None, **create_kwargs: Any
    ) -> None:
        self.model = model
        self.create_kwargs = create_kwargs
        self._owns_client = client is None
        if client is None:
            try:
                client = openai.OpenAI()
            except openai.OpenAIError as e:
                raise ModelError(
                    f"cannot create an OpenAI client ({short(e)}); "
                    "set OPENAI_API_KEY or pass client=openai.OpenAI(...)"
                ) from e
        self.client = client

    def close(self) -> None:
        """Close the client if this model created it; a client passed in is the caller's."""
        if self._owns_client:
            self.client.close()

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        kwargs: dict[str, Any] = dict(self.create_kwargs)
        if tools:
            kwargs["tools"] = to_openai_tools(tools)
        try:
            completion: object = self.client.chat.completions.create(
                model=self.model,
                messages=cast(Any, to_openai_messages(messages)),
                **kwargs,
            )
        except openai.APIStatusError as e:
            raise ModelError(
                f"OpenAI answered HTTP {e.status_code} for model '{self.model}' "
                f"({api_message(e.body, e.message)}); {hint(e.status_code, _HINTS)}",
                retryable=retryable_status(e.status_code),
            ) from e
        except openai.APIConnectionError as e:
            raise ModelError(
                f"could not reach OpenAI at {self.client.base_url} ({short(e.message)}); "
                "check the base URL and the network",
                retryable=True,
            ) from e
        except openai.OpenAIError as e:
            raise ModelError(
                f"OpenAI's answer for model '{self.model}' could not be read ({short(e)}); "
                "check that the base URL points at a Chat Completions API"
            ) from e
        except ValueError as e:  # a JSON content type with a body that is not JSON
            raise ModelError(
                f"OpenAI answered model '{self.model}' with a body that is not JSON "
                f"({short(e)}); check that the base URL points at a Chat Completions API"
            ) from e
        return self._to_message(completion)

    def _to_message(self, completion: object) -> Message:
        try:
            choices = getattr(completion, "choices", None)
            if not isinstance(choices, list) or not choices:
                raise TypeError("no choices")
            message = choices[0].message
            content = message.content or getattr(message, "refusal", None) or ""
            if not isinstance(content, str):
                raise TypeError("content is not a string")
            calls = tuple(self._to_call(tc) for tc in (message.tool_calls or ()))
        except (AttributeError, TypeError, KeyError, IndexError) as e:
            raise ModelError(
                f"OpenAI answered model '{self.model}' with something that is not a chat "
                f"completion ({short(e) or type(e).__name__}: {short(completion, 120)}); "
                "check that the base URL points at a Chat Completions API"
            ) from e
        return Message(role="assistant", content=content, tool_calls=calls)

    @staticmethod
    def _to_call(tc: Any) -> ModelToolCall:
        call_id = str(tc.id)
        function = getattr(tc, "function", None)
        if function is None:
            name = str(getattr(getattr(tc, "custom", None), "name", "") or "")
            return ModelToolCall(
                id=call_id,
                name=name,
                parse_error=f"tool call of type '{tc.type}' is not supported; call a function",
            )
        name = str(function.name)
        arguments, error = _parse_arguments(name, function.arguments)
        return ModelToolCall(id=call_id, name=name, arguments=arguments, parse_error=error)


__all__ = ["OpenAIChatModel", "to_openai_messages", "to_openai_tools"]
