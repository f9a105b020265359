"""tether on Temporal: tool calls as governed activities, approvals as durable waits.

- ``Governor(gate, principal).activities``: register them on a Temporal worker; the
  activity's body is the gate (``tether.adapters.temporal.activity``).
- ``GovernedCalls`` (``tether.adapters.temporal.workflow``): in the workflow, ``await
  calls.call(tool, arguments)``; an approval is a signal-and-timer wait in the workflow.
- ``ApprovalWaker`` (``tether.adapters.temporal.waker``): signals a workflow when its
  approval is decided, from wherever approvers decide.
- ``DevServer`` (``tether.adapters.temporal.devserver``): a local ``temporal server
  start-dev`` for tests and examples.

``pip install -e '.[temporal]'`` brings ``temporalio``. The names load on first use, so a
workflow module importing ``tether.adapters.temporal.workflow`` in its sandbox does not pull
the gate in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.adapters.temporal.activity import Governor
    from tether.adapters.temporal.devserver import DevServer
    from tether.adapters.temporal.shapes import ACTIVITY, APPROVAL_SIGNAL, CallAnswer, CallRequest
    from tether.adapters.temporal.waker import ApprovalWaker
    from tether.adapters.temporal.workflow import GovernedCalls

__all__ = [
    "ACTIVITY",
    "APPROVAL_SIGNAL",
    "ApprovalWaker",
    "CallAnswer",
    "CallRequest",
    "DevServer",
    "GovernedCalls",
    "Governor",
]

_WHERE = {
    "ACTIVITY": "shapes",
    "APPROVAL_SIGNAL": "shapes",
    "CallAnswer": "shapes",
    "CallRequest": "shapes",
    "Governor": "activity",
    "GovernedCalls": "workflow",
    "ApprovalWaker": "waker",
    "DevServer": "devserver",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{where}"), name)
