"""Calls whose outcome is unknown, across gateway sessions and restarts.

A gateway killed mid-call leaves the call's effect ``dispatched``; a client that reconnects
sends the request again in a new session, which is a new run, where the same request would be
a new call. So the gateway remembers, per principal, the tool and arguments of every call left
unsettled — loaded from the ledger when it starts, added to when a call's outcome becomes
unknown — and refuses an identical call while one is unsettled, naming it: whether it ran is
for a human (or ``tether recover``) to settle, never for a second execution to find out.

When it starts, the gateway also settles what a previous process left ``dispatched`` and no
live caller can still be waiting on — on a SQLite store, anything dispatched before every
live gateway started (``liveness``); elsewhere, past the tool's timeout and ``IN_FLIGHT_S``,
the rule ``tether recover`` applies: such effects become ``unknown`` (a read: ``absent``, it
may run again), never left ``dispatched``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tether.core.ledger import EffectStatus
from tether.errors import TetherError
from tether.runs.reconcile import UNSETTLED, reconcile_effect
from tether.runs.recovery import IN_FLIGHT_S

if TYPE_CHECKING:
    from tether.core.principal import Principal
    from tether.gate.pipeline import Gate

Key = tuple[str, str, str, str]  # principal subject, tenant, tool, argument digest


def key_of(principal: Principal, tool: str, argument_digest: str) -> Key:
    return (principal.subject, principal.tenant, tool, argument_digest)


class Unsettled:
    """The gateway's unsettled calls: key -> (run id, operation key)."""

    def __init__(self) -> None:
        self.calls: dict[Key, tuple[str, str]] = {}

    def load(
        self,
        gate: Gate,
        is_gateway_run: Callable[[str], bool],
        abandoned_before: float | None = None,
    ) -> None:
        """Read the ledger once: settle what was abandoned, remember what is still open.
        ``abandoned_before``: effects dispatched before it have no live caller."""
        now = gate.clock()
        runs: dict[str, tuple[str, str] | None] = {}
        for effect in gate.store.list_effects():
            if effect.status not in UNSETTLED or not is_gateway_run(effect.run_id):
                continue
            if effect.status is EffectStatus.DISPATCHED:
                tool = gate.registry.find(effect.tool_name)
                timeout = tool.manifest.timeout_s if tool is not None else None
                gone = abandoned_before is not None and effect.updated_at < abandoned_before
                if gone or now - effect.updated_at >= (timeout or 0.0) + IN_FLIGHT_S:
                    try:
                        settled = reconcile_effect(gate, effect)
                    except TetherError:
                        continue  # settled meanwhile by someone else
                    if settled.settlement.value != "unresolved":
                        continue
            if effect.run_id not in runs:
                with gate.store.read() as tx:
                    run = tx.get_run(effect.run_id)
                runs[effect.run_id] = None if run is None else (run.principal_id, run.tenant_id)
            who = runs[effect.run_id]
            if who is not None:
                key = (who[0], who[1], effect.tool_name, effect.argument_digest)
                self.calls[key] = (effect.run_id, effect.operation_key)

    def add(self, key: Key, run_id: str, operation_key: str) -> None:
        self.calls[key] = (run_id, operation_key)

    def blocking(self, gate: Gate, key: Key, run_id: str) -> str | None:
        """The operation key of an identical call unsettled in another run, if any (checked
        against the ledger: a human may have settled it meanwhile)."""
        if not self.calls:
            return None
        found = self.calls.get(key)
        if found is None or found[0] == run_id:
            return None
        with gate.store.read() as tx:
            effect = tx.get_effect(found[1])
        if effect is None or effect.status not in UNSETTLED:
            del self.calls[key]
            return None
        return found[1]
