"""What crosses Temporal's boundary between a workflow and tether's activity: plain
dataclasses of JSON values (Temporal's default converter carries them), no tether imports,
so a workflow module can import them inside its sandbox without pulling the gate in."""

# No ``from __future__ import annotations`` here: Temporal's converter reads these fields'
# types inside the workflow sandbox, where evaluating string annotations can fail.
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ACTIVITY", "APPROVAL_SIGNAL", "CallAnswer", "CallRequest"]

#: The governed activity's name: one activity for every tool, its body the gate.
ACTIVITY = "tether.call"
#: The signal that wakes a workflow waiting on an approval; its argument is the approval id.
APPROVAL_SIGNAL = "tether.approval_decided"


@dataclass
class CallRequest:
    """One call the workflow proposes. ``call_id`` is the call's identity in the tether run
    (the workflow's id): chosen in the workflow (``GovernedCalls`` takes ``workflow.uuid4()``
    or the key you give), so every retry and every re-run after an approval is the same
    call; empty, the activity takes ``<workflow run id>/<activity id>``."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""
    tool_version: str | None = None


@dataclass
class CallAnswer:
    """The gate's one answer (``tether.gate.answer``) in Temporal's terms. ``kind`` is
    ``ran`` (``result`` and ``text``; ``replayed`` if the ledger already held it),
    ``refused`` (``text`` is what the model may read, ``error`` the refusal's kind, e.g.
    ``PolicyDenied``, ``ApprovalDenied``, ``ApprovalExpired``) or ``waiting`` (on
    ``approval_id`` until ``expires_at``)."""

    kind: str
    call_id: str
    text: str = ""
    result: Any = None
    operation_key: str = ""
    replayed: bool = False
    error: str = ""
    reasons: list[str] = field(default_factory=list)
    approval_id: str = ""
    expires_at: float = 0.0

    @property
    def ran(self) -> bool:
        return self.kind == "ran"
