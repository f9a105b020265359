"""A model that plays back a script: seed 004's FakeModel, shipped for tests and demos."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.errors import ConfigurationError
from tether.models import Message, ModelToolCall

if TYPE_CHECKING:
    from tether.tools.registry import ToolSpec

Turn = str | Sequence[ModelToolCall] | Message


class ScriptedModel:
    """Answers each ``complete`` with the next turn: text ends the run, calls propose tools.

    The turn played is chosen by how many assistant messages the conversation already holds,
    not by how often this object was asked, so a run resumed in another process (with a new
    ScriptedModel) carries on where it stopped."""

    def __init__(self, turns: Sequence[Turn], *, record_calls: bool = True) -> None:
        self._turns = list(turns)
        # What each call was shown; a long benchmark turns this off (it copies the history).
        self.record_calls = record_calls
        self.calls: list[list[Message]] = []
        self.call_count = 0
        # (the list last seen, how long it was, assistant messages in it): a runner appends
        # to one list, so counting only the new tail keeps a long run's turns O(1).
        self._seen: tuple[Sequence[Message], int, int] | None = None

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        index = self._assistant_turns(messages)
        if index >= len(self._turns):
            raise ConfigurationError(
                f"the script has {len(self._turns)} turns and the run asked for another; "
                "add a final text turn to the script"
            )
        self.call_count += 1
        if self.record_calls:
            self.calls.append(list(messages))
        turn = self._turns[index]
        if isinstance(turn, Message):
            return turn
        if isinstance(turn, str):
            return Message(role="assistant", content=turn)
        return Message(role="assistant", tool_calls=tuple(turn))

    def _assistant_turns(self, messages: Sequence[Message]) -> int:
        start, count = 0, 0
        if self._seen is not None and self._seen[0] is messages and len(messages) >= self._seen[1]:
            start, count = self._seen[1], self._seen[2]
        count += sum(1 for m in messages[start:] if m.role == "assistant")
        self._seen = (messages, len(messages), count)
        return count
