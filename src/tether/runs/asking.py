"""Asking the model for the next turn, and what a failure to answer means for the run.

A model can fail in three ways, and each leaves the run somewhere different:

- **it could not be asked** (a timeout, a refused connection, a rate limit, the provider's
  own 5xx: ``ModelError(retryable=True)``, or a ``TimeoutError`` / ``ConnectionError`` from a
  model of one's own). Asked again, with backoff, ``retries`` times; then the run waits
  (``awaiting_model``) with everything it did kept, and `tether runs resume`, `tether
  recover` or a worker continues it exactly as after a crash. A committed side effect is
  never repeated: it is in the ledger, and the conversation stored before the model failed;
- **it said no** (a refused key, a model that does not exist, a request it cannot read:
  ``ModelError``): asking again would get the same answer, so the run fails, saying why;
- **it has a bug** (it raised anything else, or answered with something that is not a
  message): ``_ModelBug`` (internal to the runner), which fails the run too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tether.errors import ModelError
from tether.models import Message, Model
from tether.runs.turns import not_a_reply, storable
from tether.tools.registry import ToolSpec

# What a model of one's own raises when it could not reach its endpoint.
_UNREACHABLE = (TimeoutError, ConnectionError)


class _ModelBug(Exception):
    """The model raised, or answered with something that is not a message."""


@dataclass(frozen=True)
class Unanswered:
    """The model gave no answer. ``retryable``: it could not be asked (the run waits);
    otherwise it refused (the run fails)."""

    reason: str
    retryable: bool


@dataclass(frozen=True)
class Asking:
    """How often and how patiently a runner asks its model."""

    retries: int = 2
    backoff_s: float = 1.0  # doubled after each failed attempt
    sleep: Callable[[float], None] = time.sleep

    def ask(
        self, model: Model, messages: list[Message], tools: list[ToolSpec]
    ) -> Message | Unanswered:
        """The model's reply as it can be stored, or why there is none."""
        name = type(model).__name__
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                reply: Any = model.complete(messages, tools)
            except ModelError as e:
                if not e.retryable:
                    return Unanswered(f"model: {e}", retryable=False)
                failure = f"model: {e}"
            except _UNREACHABLE as e:
                failure = f"model {name} could not be reached: {e!r}"
            except Exception as e:
                raise _ModelBug(f"model {name} raised {e!r}") from e
            else:
                problem = not_a_reply(reply)
                if problem is not None:
                    raise _ModelBug(f"model {name} {problem}")
                return storable(reply)
            if attempt < self.retries:
                self.sleep(delay)
                delay *= 2
        tries = self.retries + 1
        return Unanswered(f"{failure} ({tries} attempt{'s' if tries != 1 else ''})", retryable=True)
