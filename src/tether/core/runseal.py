"""What a run's two seals cover, and whether a run's checkpoint still matches them.

A run's row says who it acts for, what it may spend, what it has spent, how many effects the
ledger should hold for it and whether it was cancelled. Each of those limits what the run may
do next, so each is sealed with the store's audit key (``tether.evidence.keys``), which is kept
outside the database:

- the **principal seal**, made once when the run starts: its principal and its limits;
- the **counters seal**, made again at every step: the budget used, the effect count and the
  cancellation flag.

The gate refuses every call of a run whose seals are missing or do not verify, and
``tether audit verify`` names such a run: a row edited with plain SQL (another tenant, the step
counter reset, a cancelled run set running, an effect row deleted with the count lowered)
fails one or the other, and no field is "checked when present".

A whole row put back to an earlier version that tether itself wrote carries valid seals; the
effect count checked against the ledger (here and in ``verify``) catches that once the run has
dispatched anything since, and a signed checkpoint pins the log it would have to match.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from tether.core.budget import Budget
from tether.core.digest import canonical_json
from tether.core.principal import Principal

PRINCIPAL_SEAL = "principal"
COUNTERS_SEAL = "run counters"


class Seals(Protocol):
    """Makes and checks tether's own seals (``AuditKeys``): pure, in memory."""

    def seal(self, purpose: str, value: Any) -> str: ...

    def verify_seal(self, purpose: str, value: Any, seal: str | None) -> bool: ...


def sealed_identity(run_id: str, principal: Principal, budget: Budget) -> dict[str, Any]:
    """What a run's principal seal covers: who it acts for and its limits (not its
    counters, which move at every step)."""
    return {
        "run_id": run_id,
        "principal": principal.to_dict(),
        "limits": [budget.max_steps, budget.max_cost, budget.max_bytes],
    }


def sealed_counters(run_id: str, budget: Budget, effects: int, cancelled: bool) -> dict[str, Any]:
    """What a run's counters seal covers: what it has used, how many effects the ledger
    holds for it, and whether it was cancelled."""
    return {
        "run_id": run_id,
        "used": [budget.steps, budget.spent, budget.bytes],
        "effects": effects,
        "cancelled": cancelled,
    }


def seal_problem(
    seals: Seals,
    run_id: str,
    *,
    principal: Principal,
    budget: Budget,
    effects: int | None,
    cancelled: bool,
    principal_seal: str | None,
    counters_seal: str | None,
) -> str | None:
    """What is wrong with a run's seals, or None if both verify. A missing seal is wrong."""
    if not seals.verify_seal(
        PRINCIPAL_SEAL, sealed_identity(run_id, principal, budget), principal_seal
    ):
        if principal_seal is None:
            return f"run {run_id} has no principal seal"
        return f"run {run_id}'s principal and limits do not match their seal"
    if effects is None or not seals.verify_seal(
        COUNTERS_SEAL, sealed_counters(run_id, budget, effects, cancelled), counters_seal
    ):
        if counters_seal is None or effects is None:
            return f"run {run_id} has no sealed counters"
        return (
            f"run {run_id}'s counters (steps and cost used, effect count, cancellation) do not "
            "match their seal"
        )
    return None


def checkpoint_problem(
    seals: Seals, run_id: str, columns: tuple[str, str, str], checkpoint_json: str, effect_rows: int
) -> str | None:
    """What ``tether audit verify`` finds wrong with a run row as stored (``columns`` are its
    status, principal_id and tenant_id): its seals, a principal or tenant column that is not
    the sealed principal's, a cancellation its status no longer shows, an effect count the
    ledger does not hold."""
    status, principal_id, tenant_id = columns
    try:
        data = json.loads(checkpoint_json)
        principal = Principal.from_dict(data["principal"])
        budget = Budget.from_dict(data["budget"])
        effects, cancelled = data.get("effects"), bool(data.get("cancelled", False))
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"run {run_id}'s checkpoint is not one tether wrote (it does not parse)"
    problem = seal_problem(
        seals,
        run_id,
        principal=principal,
        budget=budget,
        effects=effects if isinstance(effects, int) else None,
        cancelled=cancelled,
        principal_seal=_text(data.get("principal_seal")),
        counters_seal=_text(data.get("counters_seal")),
    )
    if problem is not None:
        return problem
    if (principal_id, tenant_id) != (principal.subject, principal.tenant):
        return (
            f"run {run_id}'s row names {principal_id} in tenant {tenant_id}, but its sealed "
            f"principal is {principal.subject} in tenant {principal.tenant}"
        )
    if cancelled and status != "cancelled":
        return f"run {run_id} was cancelled, but its status reads {status!r}"
    if effects != effect_rows:
        return (
            f"run {run_id} recorded {effects} effects, but the ledger holds {effect_rows} "
            "(effect rows added or deleted outside tether)"
        )
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def resealed(seals: Seals, run_id: str, checkpoint_json: str, effect_rows: int) -> str:
    """``checkpoint_json`` with both seals made afresh over what it says now and the effect
    count the ledger holds: for the operator adopting a store as it stands (trust on first
    use, ``tether.store.keying``), never for the gate."""
    data = json.loads(checkpoint_json)
    principal = Principal.from_dict(data["principal"])
    budget = Budget.from_dict(data["budget"])
    cancelled = bool(data.get("cancelled", False))
    data["principal_seal"] = seals.seal(PRINCIPAL_SEAL, sealed_identity(run_id, principal, budget))
    data["effects"] = effect_rows
    data["counters_seal"] = seals.seal(
        COUNTERS_SEAL, sealed_counters(run_id, budget, effect_rows, cancelled)
    )
    return canonical_json(data)
