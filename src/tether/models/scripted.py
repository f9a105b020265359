"""A model that plays back a script: seed 004's FakeModel, shipped for tests and demos."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether.errors import ConfigurationError
from tether.models import Message, ModelToolCall

Turn = str | Sequence[ModelToolCall] | Message


class ScriptedModel:
    """Answers each ``complete`` with the next turn: text ends the run, calls propose tools."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self._turns = list(turns)
        self.calls: list[list[Message]] = []

    def complete(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Message:
        if len(self.calls) >= len(self._turns):
            raise ConfigurationError(
                f"the script has {len(self._turns)} turns and the run asked for another; "
                "add a final text turn to the script"
            )
        self.calls.append(list(messages))
        turn = self._turns[len(self.calls) - 1]
        if isinstance(turn, Message):
            return turn
        if isinstance(turn, str):
            return Message(role="assistant", content=turn)
        return Message(role="assistant", tool_calls=tuple(turn))
