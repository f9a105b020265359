"""A ``Model`` backed by the Anthropic Messages API (``pip install -e '.[anthropic]'``).

System messages go to the ``system`` parameter, assistant tool calls become ``tool_use``
blocks and consecutive tool messages become one user message of ``tool_result`` blocks.
Tools arrive as ``ToolSpec`` values (``Registry.tool_specs()``) and become ``{name,
description, input_schema}``. Every SDK failure, and any answer that is not a message, is
raised as ``ModelError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

try:
    import anthropic
except ImportError as e:
    raise ImportError(
        "tether.models.anthropic needs the anthropic package: pip install -e '.[anthropic]'"
    ) from e

from tether.errors import ModelError
from tether.models import Message, ModelToolCall
from tether.models.errors import api_message, hint, retryable_status, short
from tether.tools.registry import ToolSpec

_HINTS = {
    413: "the request is too large; shorten the conversation",
    529: "the API is overloaded; try again later",
}


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs in the Messages API ``tools`` format."""
    return [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in tools
    ]


def to_anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Tether messages as the Messages API's ``(system, messages)``."""
    system: list[str] = []
    wire: list[dict[str, Any]] = []

    def add_user_blocks(blocks: list[dict[str, Any]]) -> None:
        # Tool results and a following user turn share one user message: roles alternate.
        last = wire[-1] if wire else None
        if last is not None and last["role"] == "user" and isinstance(last["content"], list):
            last["content"].extend(blocks)
        else:
            wire.append({"role": "user", "content": blocks})

    for m in messages:
        if m.role == "system":
            if m.content:
                system.append(m.content)
        elif m.role == "tool":
            add_user_blocks(
                [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.content}]
            )
        elif m.role == "user":
            if wire and wire[-1]["role"] == "user" and isinstance(wire[-1]["content"], list):
                add_user_blocks([{"type": "text", "text": m.content}])
            else:
                wire.append({"role": "user", "content": m.content})
        elif m.tool_calls:
            blocks: list[dict[str, Any]] = []
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            blocks.extend(
                {"type": "tool_use", "id": tc.id, "name": tc.name, "input": dict(tc.arguments)}
                for tc in m.tool_calls
            )
            wire.append({"role": "assistant", "content": blocks})
        else:
            wire.append({"role": "assistant", "content": m.content})
    return "\n\n".join(system), wire


class AnthropicModel:
    """Answers with ``client.messages.create``; ``create_kwargs`` go to every call
    (``stop_sequences=[...]``, ``tool_choice=...``)."""

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.Anthropic | None = None,
        max_tokens: int = 1024,
        **create_kwargs: Any,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.create_kwargs = create_kwargs
        self._owns_client = client is None
        if client is None:
            try:
                client = anthropic.Anthropic()
            except anthropic.AnthropicError as e:
                raise ModelError(
                    f"cannot create an Anthropic client ({short(e)}); "
                    "set ANTHROPIC_API_KEY or pass client=anthropic.Anthropic(...)"
                ) from e
        self.client = client

    def close(self) -> None:
        """Close the client if this model created it; a client passed in is the caller's."""
        if self._owns_client:
            self.client.close()

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        system, wire = to_anthropic_messages(messages)
        kwargs: dict[str, Any] = dict(self.create_kwargs)
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = to_anthropic_tools(tools)
        try:
            response: object = self.client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=cast(Any, wire),
                **kwargs,
            )
        except anthropic.APIStatusError as e:
            raise ModelError(
                f"Anthropic answered HTTP {e.status_code} for model '{self.model}' "
                f"({api_message(e.body, e.message)}); {hint(e.status_code, _HINTS)}",
                retryable=retryable_status(e.status_code),
            ) from e
        except anthropic.APIConnectionError as e:
            raise ModelError(
                f"could not reach Anthropic at {self.client.base_url} ({short(e.message)}); "
                "check the base URL and the network",
                retryable=True,
            ) from e
        except anthropic.AnthropicError as e:
            raise ModelError(
                f"Anthropic's answer for model '{self.model}' could not be read ({short(e)}); "
                "check that the base URL points at the Messages API"
            ) from e
        except ValueError as e:  # a JSON content type with a body that is not JSON
            raise ModelError(
                f"Anthropic answered model '{self.model}' with a body that is not JSON "
                f"({short(e)}); check that the base URL points at the Messages API"
            ) from e
        return self._to_message(response)

    def _to_message(self, response: object) -> Message:
        try:
            blocks = getattr(response, "content", None)
            if not isinstance(blocks, list):
                raise TypeError("no content blocks")
            texts: list[str] = []
            calls: list[ModelToolCall] = []
            for block in blocks:
                kind = getattr(block, "type", None)
                if kind == "text":
                    texts.append(str(block.text))
                elif kind == "tool_use":
                    calls.append(self._to_call(block))
        except (AttributeError, TypeError, KeyError) as e:
            raise ModelError(
                f"Anthropic answered model '{self.model}' with something that is not a message "
                f"({short(e) or type(e).__name__}: {short(response, 120)}); "
                "check that the base URL points at the Messages API"
            ) from e
        return Message(role="assistant", content="".join(texts), tool_calls=tuple(calls))

    @staticmethod
    def _to_call(block: Any) -> ModelToolCall:
        name = str(block.name)
        value = block.input
        if isinstance(value, dict):
            return ModelToolCall(id=str(block.id), name=name, arguments=value)
        return ModelToolCall(
            id=str(block.id),
            name=name,
            parse_error=f"arguments for '{name}' must be a JSON object, got {type(value).__name__}",
        )


__all__ = ["AnthropicModel", "to_anthropic_messages", "to_anthropic_tools"]
