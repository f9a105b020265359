"""A model that plays back a script: seed 004's FakeModel, shipped for tests and demos."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether.errors import ConfigurationError
from tether.models import Message, ModelToolCall

Turn = str | Sequence[ModelToolCall] | Message


class ScriptedModel:
    """Answers each ``complete`` with the next turn: text ends the run, calls propose tools.

    The turn played is chosen by how many assistant messages the conversation already holds,
    not by how often this object was asked, so a run resumed in another process (with a new
    ScriptedModel) carries on where it stopped."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self._turns = list(turns)
        self.calls: list[list[Message]] = []

    def complete(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Message:
        index = sum(1 for m in messages if m.role == "assistant")
        if index >= len(self._turns):
            raise ConfigurationError(
                f"the script has {len(self._turns)} turns and the run asked for another; "
                "add a final text turn to the script"
            )
        self.calls.append(list(messages))
        turn = self._turns[index]
        if isinstance(turn, Message):
            return turn
        if isinstance(turn, str):
            return Message(role="assistant", content=turn)
        return Message(role="assistant", tool_calls=tuple(turn))
