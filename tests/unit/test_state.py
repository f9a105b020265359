"""A run's checkpoint: what loading it gives back, with and without the parse cache."""

from __future__ import annotations

import gc
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.core.budget import Budget
from tether.core.digest import canonical_json
from tether.core.principal import Principal
from tether.core.runseal import PRINCIPAL_SEAL, sealed_identity
from tether.evidence.keys import AuditKeys
from tether.gate.state import RunState, seal_problem_of, sealed_checkpoint
from tether.store.rows import RunRecord

PRINCIPAL = Principal(subject="user-1", tenant="acme", scopes=frozenset({"b", "a"}))


def _record(text: str) -> RunRecord:
    return RunRecord(
        run_id="run-1",
        state_version=1,
        status="running",
        principal_id="user-1",
        tenant_id="acme",
        policy_version="p1",
        checkpoint_json=text,
        created_at=0.0,
        updated_at=0.0,
    )


def _state(**extra: Any) -> RunState:
    return RunState(
        principal=PRINCIPAL,
        budget=Budget(max_steps=5, steps=2),
        extra=extra,
        effects=2,
        principal_seal="kid:mac",
    )


@pytest.mark.parametrize(
    "extra",
    [{}, {"turns": 3, "note": "x", "ratio": 0.5, "done": False, "none": None}, {"meta": {"a": 1}}],
)
def test_load_gives_back_what_was_dumped(extra: dict[str, Any]) -> None:
    text = _state(**extra).dump()
    loaded = RunState.load(_record(text))
    assert loaded == RunState.parse(text)
    assert dict(loaded.extra) == extra
    assert loaded.budget.steps == 2
    assert loaded.principal == PRINCIPAL
    assert RunState.load(_record(text)).dump() == text


def test_a_cached_state_cannot_be_changed_through_its_extra() -> None:
    text = _state(turns=1).dump()
    loaded = RunState.load(_record(text))
    with pytest.raises(TypeError):
        loaded.extra["turns"] = 99  # type: ignore[index]
    assert RunState.load(_record(text)).extra["turns"] == 1


def test_nested_extra_is_parsed_afresh_each_time() -> None:
    text = _state(meta={"a": 1}).dump()
    first = RunState.load(_record(text))
    first.extra["meta"]["a"] = 2  # a caller's own copy: it must not reach the next load
    assert RunState.load(_record(text)).extra["meta"] == {"a": 1}


def test_edited_text_is_parsed_not_served_from_the_cache() -> None:
    text = _state(turns=1).dump()
    RunState.load(_record(text))
    edited = text.replace('"max_steps":5', '"max_steps":500')
    assert edited != text
    assert RunState.load(_record(edited)).budget.max_steps == 500
    assert RunState.load(_record(text)).budget.max_steps == 5


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
extra_keys = st.sampled_from(["turns", "effects", "budget", "principal_seal", "é", "Z", ""])


@given(
    extra=st.dictionaries(extra_keys | st.text(), scalars | st.lists(scalars), max_size=6),
    effects=st.none() | st.integers(min_value=0),
    seal=st.none() | st.text(),
    scopes=st.frozensets(st.text(), max_size=3),
)
def test_the_assembled_checkpoint_is_the_canonical_json_of_the_merge(
    extra: dict[str, Any], effects: int | None, seal: str | None, scopes: frozenset[str]
) -> None:
    state = RunState(
        principal=Principal(subject="s", tenant="t\u2028", scopes=scopes),
        budget=Budget(max_cost=10, spent=3),
        extra=extra,
        effects=effects,
        principal_seal=seal,
    )
    own: dict[str, Any] = {"principal": state.principal.to_dict(), "budget": state.budget.to_dict()}
    if effects is not None:
        own["effects"] = effects
    if seal is not None:
        own["principal_seal"] = seal
    assert state.dump() == canonical_json({**extra, **own})


def test_a_keyring_in_a_freed_rings_place_checks_the_seals_itself() -> None:
    # The "known sound" memo is keyed by the ring's id(); a ring freed and another made in
    # its place (CPython reuses the address) must not inherit what the first one checked.
    state = RunState(principal=PRINCIPAL, budget=Budget(max_steps=5))
    first = AuditKeys.ephemeral()
    seal = first.seal(PRINCIPAL_SEAL, sealed_identity("run-1", state.principal, state.budget))
    text = sealed_checkpoint(replace(state, principal_seal=seal), "run-1", first)
    sealed = RunState.parse(text)
    assert seal_problem_of(sealed, "run-1", first, text) is None
    freed = id(first)
    del first
    gc.collect()
    rings = [AuditKeys.ephemeral() for _ in range(200)]
    same = next((r for r in rings if id(r) == freed), None)
    # Either the memo kept the first ring alive (then no ring can take its id), or the ring
    # in its place is checked afresh and its seals do not verify.
    assert same is None or seal_problem_of(sealed, "run-1", same, text) is not None
