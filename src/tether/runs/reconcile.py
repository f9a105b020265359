"""Reconciliation: settling effects whose outcome is unknown by asking the outside system.

After a crash, an effect left ``dispatched`` may or may not have happened; after a timeout it
is ``unknown``. Neither is ever retried blindly. A tool's ``reconcile(operation_key)`` says
what happened: a result (it did: ``reconciled_committed``, and the result is recorded as if the
call had returned) or ``None`` (it did not: ``reconciled_absent``, and the call may be sent
again with the same key). A read-tier tool with no ``reconcile`` is settled as absent (a read
changes nothing, so running it again is harmless). Any other tool that cannot reconcile
leaves the effect ``unknown`` for a human to resolve (``tether effects resolve``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import Effect, EffectStatus
from tether.core.screening import redact
from tether.crash import crash_point
from tether.errors import NotFound, StoreError
from tether.gate.pipeline import Gate
from tether.gate.settle import Result
from tether.runs.leases import lease_held
from tether.store.base import Store
from tether.tools.registry import Risk

UNSETTLED = (EffectStatus.DISPATCHED, EffectStatus.UNKNOWN)
_NO_SIDE_EFFECTS = (Risk.READ, Risk.SENSITIVE_READ)


class Settlement(StrEnum):
    COMMITTED = "committed"
    ABSENT = "absent"
    UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class Reconciled:
    operation_key: str
    settlement: Settlement
    detail: str = ""


def mark_unknown(store: Store, effect: Effect, now: float, why: str) -> Effect:
    """A ``dispatched`` effect whose caller is gone becomes ``unknown``: say so, durably."""
    if effect.status is not EffectStatus.DISPATCHED:
        return effect
    unknown = effect.advance(EffectStatus.UNKNOWN, now)
    with store.transaction() as tx:
        tx.update_effect(unknown, EffectStatus.DISPATCHED)
        tx.append_audit(
            "effect_unknown",
            at=now,
            run_id=effect.run_id,
            data={"operation_key": effect.operation_key, "why": why},
        )
    return unknown


def settle(
    store: Store,
    effect: Effect,
    *,
    committed: bool,
    now: float,
    result: Any = None,
    actor: str | None = None,
    how: str = "reconcile",
    sensitive_fields: frozenset[str] = frozenset(),
) -> Effect:
    """Record what is now known about an unknown effect (from ``reconcile`` or a human)."""
    if effect.status is not EffectStatus.UNKNOWN:
        raise StoreError(
            f"effect {effect.operation_key} is {effect.status.value}; only an unknown "
            "effect can be settled"
        )
    if committed:
        value, reference = (
            (result.value, result.external_reference)
            if isinstance(result, Result)
            else (result, None)
        )
        safe, _ = redact(value, sensitive_fields)
        result_json = canonical_json(safe)
        settled = effect.advance(
            EffectStatus.RECONCILED_COMMITTED,
            now,
            result_json=result_json,
            result_digest="sha256:" + sha256_hex(result_json),
            external_reference=reference,
        )
    else:
        settled = effect.advance(EffectStatus.RECONCILED_ABSENT, now)
    with store.transaction() as tx:
        tx.update_effect(settled, EffectStatus.UNKNOWN)
        tx.append_audit(
            "effect_reconciled",
            at=now,
            run_id=effect.run_id,
            actor=actor,
            data={
                "operation_key": effect.operation_key,
                "status": settled.status.value,
                "result_digest": settled.result_digest,
                "how": how,
            },
        )
    crash_point("recovery.after_reconcile")
    return settled


def reconcile_effect(gate: Gate, effect: Effect) -> Reconciled:
    """Settle one dispatched or unknown effect through its tool's ``reconcile``, if it has one."""
    now = gate.clock()
    effect = mark_unknown(gate.store, effect, now, "its caller stopped before recording an outcome")
    if effect.status is not EffectStatus.UNKNOWN:
        return Reconciled(effect.operation_key, _settlement(effect.status))
    tool = gate.registry.find(effect.tool_name)
    if tool is not None and tool.reconcile is None and tool.manifest.risk in _NO_SIDE_EFFECTS:
        # A read changes nothing outside, so whether it ran does not matter: it may run again.
        settled = settle(gate.store, effect, committed=False, now=gate.clock(), how="read tier")
        return Reconciled(effect.operation_key, _settlement(settled.status))
    if tool is None or tool.reconcile is None:
        return Reconciled(
            effect.operation_key,
            Settlement.UNRESOLVED,
            f"'{effect.tool_name}' cannot reconcile; resolve it with "
            f"`tether effects resolve {effect.operation_key} --committed|--absent`",
        )
    try:
        found = tool.reconcile(effect.operation_key)
    except Exception as e:
        return Reconciled(
            effect.operation_key, Settlement.UNRESOLVED, f"reconcile failed: {e!r}; try again"
        )
    settled = settle(
        gate.store,
        effect,
        committed=found is not None,
        now=gate.clock(),
        result=found,
        sensitive_fields=tool.manifest.sensitive_fields,
    )
    return Reconciled(effect.operation_key, _settlement(settled.status))


def reconcile_run(gate: Gate, run_id: str) -> list[Reconciled]:
    """Settle every unsettled effect of a run; the caller must hold the run's lease."""
    return [
        reconcile_effect(gate, e) for e in gate.store.list_effects(run_id) if e.status in UNSETTLED
    ]


def _settlement(status: EffectStatus) -> Settlement:
    if status.took_effect:
        return Settlement.COMMITTED
    if status is EffectStatus.RECONCILED_ABSENT:
        return Settlement.ABSENT
    return Settlement.UNRESOLVED


def resolve_effect(
    store: Store,
    operation_key: str,
    *,
    committed: bool,
    now: float,
    result: Any = None,
    actor: str,
) -> Effect:
    """A human's word on an effect nothing could reconcile."""
    with store.read() as tx:
        effect = tx.get_effect(operation_key)
        run = tx.get_run(effect.run_id) if effect is not None else None
    if effect is None:
        raise NotFound(f"no effect {operation_key}; see `tether effects list`")
    if run is not None and lease_held(run, "resolve", now):
        raise StoreError(
            f"run {run.run_id} is being driven by {run.lease_owner}; its call may still be "
            "in flight, so its outcome cannot be declared yet"
        )
    if effect.status not in UNSETTLED:
        raise StoreError(
            f"effect {operation_key} is already {effect.status.value}; nothing to resolve"
        )
    effect = mark_unknown(store, effect, now, f"{actor} is resolving it")
    return settle(
        store, effect, committed=committed, now=now, result=result, actor=actor, how="human"
    )
