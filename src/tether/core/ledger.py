"""The effect ledger's vocabulary: operation keys, effect records and their state machine.

    dispatched -> committed | failed | unknown
    unknown  -> reconciled_committed | reconciled_absent
    reconciled_absent -> dispatched        (the call never happened: it may be sent again,
                                            with the same key)

An effect is born ``dispatched``, written durably *before* the tool is called, so after a
crash the ledger knows which calls may have happened. A timeout is ``unknown``, never
``failed``: we do not know whether the outside world changed. Only asking the outside system
(reconciliation) moves an unknown effect on; a retry is allowed only once it is known to be
absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

from tether.core.digest import evolve
from tether.core.records import FIXED, Record
from tether.errors import InvalidTransition


class EffectStatus(StrEnum):
    """The states of an effect; see the module docstring for the machine."""

    # There is no "prepared": no row was ever written before dispatch, so the state was never
    # offered to anything that reads the ledger. The status column has no CHECK constraint, so
    # the schema needs no change for it.
    DISPATCHED = "dispatched"
    COMMITTED = "committed"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RECONCILED_COMMITTED = "reconciled_committed"
    RECONCILED_ABSENT = "reconciled_absent"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def took_effect(self) -> bool:
        return self in (EffectStatus.COMMITTED, EffectStatus.RECONCILED_COMMITTED)


# Nothing can follow these. reconciled_absent is not among them: the call may be sent again.
_TERMINAL = frozenset(
    {EffectStatus.COMMITTED, EffectStatus.FAILED, EffectStatus.RECONCILED_COMMITTED}
)

TRANSITIONS: Mapping[EffectStatus, frozenset[EffectStatus]] = {
    EffectStatus.DISPATCHED: frozenset(
        {EffectStatus.COMMITTED, EffectStatus.FAILED, EffectStatus.UNKNOWN}
    ),
    EffectStatus.UNKNOWN: frozenset(
        {EffectStatus.RECONCILED_COMMITTED, EffectStatus.RECONCILED_ABSENT}
    ),
    EffectStatus.COMMITTED: frozenset(),
    EffectStatus.FAILED: frozenset(),
    EffectStatus.RECONCILED_COMMITTED: frozenset(),
    EffectStatus.RECONCILED_ABSENT: frozenset({EffectStatus.DISPATCHED}),
}


def operation_key(run_id: str, call_id: str, tool: str, tool_version: str) -> str:
    """The idempotency key of one call (seed 000): ``run:call:tool:version``.

    A ``:`` or ``%`` inside a part is percent-escaped, so two different calls can never
    share a key (run ``a:b`` + call ``c`` vs run ``a`` + call ``b:c``)."""
    return ":".join(_escape(p) for p in (run_id, call_id, tool, tool_version))


def _escape(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


@dataclass(frozen=True, kw_only=True)
class Effect(Record):
    """One row of the ledger (seed 000 ``agent_effects`` plus timestamps and attempts)."""

    # The fields in ``agent_effects`` column order, which is also the order of the cells its
    # row digest covers (``tether.evidence.crosscheck``): reordering them changes every effect
    # digest.
    operation_key: Annotated[str, FIXED]
    run_id: Annotated[str, FIXED]
    call_id: Annotated[str, FIXED]
    tool_name: Annotated[str, FIXED]
    tool_version: Annotated[str, FIXED]
    argument_digest: Annotated[str, FIXED]
    status: EffectStatus
    result_digest: str | None = None
    external_reference: str | None = None
    result_json: str | None = None
    error: str | None = None
    attempts: int = 0
    created_at: Annotated[float, FIXED] = 0.0
    updated_at: float = 0.0
    # The manifest's schema digest when the call was dispatched: a call replayed after the
    # tool's schema changed is a conflict, not a replay (I2). Last: a later migration added
    # the column.
    schema_digest: Annotated[str | None, FIXED] = None

    def advance(self, target: EffectStatus, now: float, **changes: Any) -> Effect:
        """The effect in ``target`` state; raises on a transition the machine forbids."""
        if target not in TRANSITIONS[self.status]:
            raise InvalidTransition(self.operation_key, self.status.value, target.value)
        return evolve(self, status=target, updated_at=now, **changes)

    def changes(
        self, *, tool: str, tool_version: str, schema_digest: str, argument_digest: str
    ) -> tuple[str, ...]:
        """What differs between this recorded call and the same call proposed now (I2)."""
        found = []
        if tool != self.tool_name:
            found.append(f"tool ({self.tool_name} -> {tool})")
        if tool_version != self.tool_version:
            found.append(f"tool version ({self.tool_version} -> {tool_version})")
        if self.schema_digest is not None and schema_digest != self.schema_digest:
            found.append("tool schema")
        if argument_digest != self.argument_digest:
            found.append("arguments")
        return tuple(found)
