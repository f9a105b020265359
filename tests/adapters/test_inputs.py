"""The user's messages of a run recorded as its trusted input once each
(``tether.adapters.inputs``), on every store: from one process's memory, from another
process's, and for a run this process has forgotten."""

from __future__ import annotations

import pytest

from tests.conftest import Backend
from tether import Gate, Policy, Principal, Registry
from tether.adapters import inputs
from tether.adapters.inputs import UserInputs
from tether.errors import RunNotFound

PRINCIPAL = Principal(subject="agent", tenant="t1")


def gate_on(backend: Backend, *, another_process: bool = False) -> Gate:
    store = backend.open() if another_process else backend.store
    return Gate(Registry(), Policy(version="v1"), store)


def recorded(backend: Backend, run_id: str) -> list[tuple[str, str]]:
    with backend.store.read() as tx:
        return tx.inputs(run_id)


def test_each_text_is_recorded_once_per_run(backend: Backend) -> None:
    gate = gate_on(backend)
    run, other = gate.start_run(PRINCIPAL), gate.start_run(PRINCIPAL)
    first = UserInputs(gate)
    assert first.note(run, ["hi", "", "bye", "hi"]) == ["hi", "bye"]
    assert first.note(run, ["hi", "bye"]) == []
    assert first.note(other, ["hi"]) == ["hi"]  # the same words in another run are its own
    # Another process, with nothing in memory, finds what the first recorded...
    later = UserInputs(gate_on(backend, another_process=True))
    assert later.note(run, ["bye", "again"]) == ["again"]
    # ...and the first finds what the other recorded, though its memory does not know it.
    assert first.note(run, ["again"]) == []
    assert recorded(backend, run) == [("user", "hi"), ("user", "bye"), ("user", "again")]
    assert recorded(backend, other) == [("user", "hi")]


def test_a_run_forgotten_from_memory_is_read_from_the_store(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inputs, "MAX_RUNS", 1)
    gate = gate_on(backend)
    a, b = gate.start_run(PRINCIPAL), gate.start_run(PRINCIPAL)
    noted = UserInputs(gate)
    noted.note(a, ["for a"])
    noted.note(b, ["for b"])  # a is forgotten
    assert noted.note(a, ["for a"]) == []
    assert recorded(backend, a) == [("user", "for a")]


def test_an_unknown_run_is_refused_at_once(backend: Backend) -> None:
    with pytest.raises(RunNotFound, match="no run run-missing; start one"):
        UserInputs(gate_on(backend)).note("run-missing", ["hello"])
