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
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from tether.core.budget import Budget
from tether.core.digest import canonical_json, evolve
from tether.core.principal import Principal
from tether.core.runseal import COUNTERS_SEAL, Seals, seal_problem, sealed_counters
from tether.store.rows import RunRecord


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
    # Set by ``tether runs cancel`` and sealed with the counters: a status column set back
    # to ``running`` does not undo it (``tether.core.runseal``).
    cancelled: bool = False
    counters_seal: str | None = None

    @classmethod
    def load(cls, record: RunRecord) -> RunState:
        text = record.checkpoint_json
        state = _PARSED.get(text)
        if state is None:
            state = cls.parse(text)
            _remember(text, state)
        return state

    @classmethod
    def parse(cls, text: str) -> RunState:
        data = json.loads(text)
        return cls(
            principal=Principal.from_dict(data["principal"]),
            budget=Budget.from_dict(data["budget"]),
            extra={k: v for k, v in data.items() if k not in _OWN},
            effects=data.get("effects"),
            principal_seal=data.get("principal_seal"),
            cancelled=data.get("cancelled") is True,
            counters_seal=data.get("counters_seal"),
        )

    def dump(self) -> str:
        text = self._encode()
        _remember(text, self)
        return text

    def _encode(self) -> str:
        own: dict[str, Any] = {
            "principal": self.principal.to_dict(),
            "budget": self.budget.to_dict(),
        }
        if self.effects is not None:
            own["effects"] = self.effects
        if self.principal_seal is not None:
            own["principal_seal"] = self.principal_seal
        if self.cancelled:
            own["cancelled"] = True
        if self.counters_seal is not None:
            own["counters_seal"] = self.counters_seal
        return canonical_json({**self.extra, **own})


_OWN = ("principal", "budget", "effects", "principal_seal", "cancelled", "counters_seal")

# Checkpoint text -> the state it holds. The gate loads a run's checkpoint at every call and
# it is, byte for byte, the one it wrote at the call before; parsing it again (JSON, then a
# principal, then a budget) costs more than the rest of loading the run. Equal text is an
# equal state, so this is a cache of a pure function: a row edited outside tether is new
# text, parsed afresh (and its seal still checked by the gate). Only states whose ``extra``
# holds plain scalars are kept, behind a read-only view, so no caller can change what
# another will load. Bounded: cleared whole when full, which is atomic under threads.
_PARSED: dict[str, RunState] = {}
_PARSED_MAX = 4096
_SCALARS = (str, int, float, bool, type(None))


def _remember(text: str, state: RunState) -> None:
    # Anything ``parse`` would not give back as it is (a nested value someone may change, a
    # key the state's own fields overwrite, a key that is not a string) is not kept.
    if not all(
        type(k) is str and k not in _OWN and type(v) in _SCALARS for k, v in state.extra.items()
    ):
        return
    if not isinstance(state.extra, MappingProxyType):
        state = RunState(
            principal=state.principal,
            budget=state.budget,
            extra=MappingProxyType(dict(state.extra)),
            effects=state.effects,
            principal_seal=state.principal_seal,
            cancelled=state.cancelled,
            counters_seal=state.counters_seal,
        )
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[text] = state


def sealed(state: RunState, run_id: str, seals: Seals) -> RunState:
    """``state`` with its counters sealed afresh (after every change to them)."""
    effects = state.effects if state.effects is not None else 0
    payload = sealed_counters(run_id, state.budget, effects, state.cancelled)
    return replace(state, effects=effects, counters_seal=seals.seal(COUNTERS_SEAL, payload))


def sealed_checkpoint(state: RunState, run_id: str, seals: Seals) -> str:
    """``sealed(state)`` as the checkpoint text to store. The text is remembered as sound
    under ``seals``: the gate reads it back at the run's next call, and checking seals this
    process just made would only repeat its own work."""
    text = sealed(state, run_id, seals).dump()
    _remember_sound(run_id, seals, text)
    return text


def checkpoint(
    state: RunState, budget: Budget, effects: int | None = None, *, run_id: str, seals: Seals
) -> str:
    """The run's checkpoint after a step: the new budget counters and effect count, sealed.

    ``sealed_checkpoint`` of the state with the new counters, made in one step: the gate
    does this at every call, and building the state twice (then ``replace``, which runs
    ``__init__`` again) cost as much as the seal."""
    count = state.effects if effects is None else effects
    count = 0 if count is None else count
    seal = seals.seal(COUNTERS_SEAL, sealed_counters(run_id, budget, count, state.cancelled))
    text = evolve(state, budget=budget, effects=count, counters_seal=seal).dump()
    _remember_sound(run_id, seals, text)
    return text


def seal_problem_of(
    state: RunState, run_id: str, seals: Seals, text: str | None = None
) -> str | None:
    """What is wrong with the run's seals (``tether.core.runseal``), or None. ``text`` is
    the checkpoint ``state`` was loaded from, if the caller has it: text this process sealed
    (or checked) under ``seals`` is not checked again."""
    known = _SOUND.get((run_id, id(seals)))
    if text is not None and known is not None and known[0] is seals and known[1] == text:
        return None
    problem = _seal_problem(state, run_id, seals)
    if problem is None and text is not None:
        _remember_sound(run_id, seals, text)
    return problem


# (run id, keyring) -> the last checkpoint text known to carry valid seals under that ring.
# One entry per run, so an older text (a row put back) is checked again; bounded like _PARSED.
# The entry holds the ring itself: an id is only unique among live objects, and a ring
# made after this one was freed (another store's, with other keys) could take its id.
_SOUND: dict[tuple[str, int], tuple[Seals, str]] = {}


def _remember_sound(run_id: str, seals: Seals, text: str) -> None:
    if len(_SOUND) >= _PARSED_MAX:
        _SOUND.clear()
    _SOUND[run_id, id(seals)] = (seals, text)


def _seal_problem(state: RunState, run_id: str, seals: Seals) -> str | None:
    return seal_problem(
        seals,
        run_id,
        principal=state.principal,
        budget=state.budget,
        effects=state.effects,
        cancelled=state.cancelled,
        principal_seal=state.principal_seal,
        counters_seal=state.counters_seal,
    )


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"
