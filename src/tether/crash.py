"""Named crash points: where a crash matters, the code says so by name.

``TETHER_CRASH_AT=<name>`` (or ``<name>:<n>`` for the n-th time the point is passed) makes the
process kill itself there with SIGKILL, exactly as ``kill -9`` would: no cleanup, no flush, no
``finally``. Production code passes the points for free (the variable is read once, at
import; a comparison per point). The chaos suite arms each point in turn and proves that
recovery brings every run back with each side effect happening exactly once.
"""

from __future__ import annotations

import os
import signal

ENV = "TETHER_CRASH_AT"

POINTS: dict[str, str] = {
    "gate.before_dispatch_commit": "the dispatched row is written but not yet committed",
    "gate.after_dispatch_commit": "dispatched is durable; the tool has not been called",
    "gate.after_tool_return": "the tool returned; its outcome is not yet recorded",
    "gate.after_outcome_commit": "the outcome is recorded; the run has not stored the answer",
    "approval.after_grant_commit": "an approval was granted and committed",
    "runs.after_claim": "a worker holds the run's lease; nothing else has happened",
    "runs.after_model_reply": "the model answered; the answer is not yet stored",
    "runs.after_turn_commit": "a model turn is stored; its tool calls have not started",
    "runs.after_tool_message": "a tool's answer is stored as a message",
    "runs.before_finish": "the run's last step is stored; its final status is not",
    "recovery.after_reconcile": "an effect was reconciled; the run has not been resumed",
}

_counts: dict[str, int] = {}
_armed: tuple[str, int] | None = None


def arm_from_environment() -> None:
    """Read ``TETHER_CRASH_AT`` (done at import; call again after changing it in-process)."""
    global _armed
    spec = os.environ.get(ENV)
    if not spec:
        _armed = None
        return
    name, _, nth = spec.partition(":")
    _armed = (name, int(nth) if nth.isdigit() else 1)
    _counts.clear()


arm_from_environment()


def crash_point(name: str) -> None:
    """Die here, at once, if ``TETHER_CRASH_AT`` names this point (and occurrence)."""
    armed = _armed
    if armed is None or armed[0] != name:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] == armed[1]:
        os.kill(os.getpid(), signal.SIGKILL)


def validate(spec: str) -> None:
    """Raise ValueError for a ``TETHER_CRASH_AT`` value that names no point."""
    name, _, nth = spec.partition(":")
    if name not in POINTS:
        raise ValueError(f"unknown crash point {name!r}; see `tether debug crash-points`")
    if nth and (not nth.isdigit() or int(nth) < 1):
        raise ValueError(f"crash point occurrence must be a positive number, not {nth!r}")
