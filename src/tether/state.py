"""The part of a run's checkpoint that the gate and the runner share: who the run acts for
(sealed with the store's key, so an edited row cannot widen it), its budget, how many
effects the ledger should hold for it, and the runner's own small counters (``extra``).
Stored as canonical JSON in ``agent_runs.checkpoint_json``, rewritten (compare-and-swap) at
every step, and bounded: it never holds the conversation, which lives one row per message.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.budget import Budget
from tether.digest import canonical_json
from tether.policy import Principal
from tether.store.base import RunRecord


@dataclass(frozen=True, kw_only=True)
class RunState:
    """A run's principal, budget and counters, as its checkpoint holds them."""

    principal: Principal
    budget: Budget
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Effects the gate has inserted for this run: a ledger holding fewer was edited behind
    # tether's back (None for runs from before the count was kept).
    effects: int | None = None
    principal_seal: str | None = None

    @classmethod
    def load(cls, record: RunRecord) -> RunState:
        data = json.loads(record.checkpoint_json)
        return cls(
            principal=Principal.from_dict(data["principal"]),
            budget=Budget.from_dict(data["budget"]),
            extra={k: v for k, v in data.items() if k not in _OWN},
            effects=data.get("effects"),
            principal_seal=data.get("principal_seal"),
        )

    def dump(self) -> str:
        own: dict[str, Any] = {
            "principal": self.principal.to_dict(),
            "budget": self.budget.to_dict(),
        }
        if self.effects is not None:
            own["effects"] = self.effects
        if self.principal_seal is not None:
            own["principal_seal"] = self.principal_seal
        return canonical_json({**self.extra, **own})


_OWN = ("principal", "budget", "effects", "principal_seal")


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"
