"""The one answer every entrance gives a proposed call, in the gate's terms.

``answer`` turns what ``Gate.call`` does into one of four things — the call **ran** (its
outcome; a note above the result when an approver edited it), was **refused** (with the text
the model may read), is **waiting** (on which approval), or is **unsettled** (which effect's
outcome is unknown) — and raises anything else, which stops the run: another resume has the
call (``CallInFlight``), the run is cancelled or gone, the store or its evidence fails.
Whether a refusal is for the model or stops the run is the error's own ``model_reads``.

The run loop, the adapters and the MCP gateway map these four into their framework's terms
and decide nothing themselves: approved, denied with a reason, edited, expired, revoked,
cancelled, unknown, replayed and conflicting calls mean here what they mean everywhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tether.errors import ApprovalRequired, OutcomeUnknown, TetherError
from tether.gate.plan import Outcome

__all__ = ["Answer", "Ran", "Refused", "Unsettled", "Waiting", "answer", "answer_async"]


@dataclass(frozen=True)
class Ran:
    """The tool ran (now, or before: a replay from the ledger); ``outcome.text`` is what the
    model reads."""

    outcome: Outcome


@dataclass(frozen=True)
class Refused:
    """The call did not run and will not as proposed; ``text`` is what the model may read."""

    error: TetherError

    @property
    def text(self) -> str:
        return str(self.error)


@dataclass(frozen=True)
class Waiting:
    """The call waits for a human to decide ``approval_id``; nothing ran."""

    signal: ApprovalRequired

    @property
    def approval_id(self) -> str:
        return self.signal.approval_id


@dataclass(frozen=True)
class Unsettled:
    """The call's effect may or may not have happened; the run waits until it is settled."""

    error: OutcomeUnknown

    @property
    def operation_key(self) -> str:
        return self.error.operation_key


Answer = Ran | Refused | Waiting | Unsettled


def _judged(error: BaseException) -> Answer:
    if isinstance(error, ApprovalRequired):
        return Waiting(error)
    if isinstance(error, OutcomeUnknown):
        return Unsettled(error)
    if isinstance(error, TetherError) and error.model_reads:
        return Refused(error)
    raise error


def answer(call: Callable[[], Outcome]) -> Answer:
    """What ``call`` (a ``Gate.call``) answers, as one of the four."""
    try:
        return Ran(call())
    except (TetherError, ApprovalRequired) as e:
        return _judged(e)


async def answer_async(call: Callable[[], Awaitable[Outcome]]) -> Answer:
    """``answer`` for ``Gate.acall``."""
    try:
        return Ran(await call())
    except (TetherError, ApprovalRequired) as e:
        return _judged(e)
