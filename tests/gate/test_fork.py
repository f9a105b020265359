"""A process forked after using the gate (a pre-forking server, ``multiprocessing`` with the
fork start method, the crash suite's children) gets a gate that works: the parent's tool
threads and in-flight marks do not come along."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tether.core.principal import Principal
from tether.gate import dispatch
from tether.gate.pipeline import Gate, ToolCall
from tether.policy.rules import Policy
from tether.store import MemoryStore
from tether.tools.registry import Manifest, Registry, Risk

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

PRINCIPAL = Principal(subject="agent-1", tenant="acme")
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def timed_gate() -> Gate:
    # A limit makes the gate run the tool in its tool thread, the thread a fork leaves behind.
    registry = Registry()
    manifest = Manifest(name="act", parameters=SCHEMA, risk=Risk.READ, timeout_s=2.0)
    registry.add(manifest, lambda n, operation_key: {"n": n})
    return Gate(registry, Policy(version="policy-1"), MemoryStore())


def call_once(gate: Gate) -> object:
    run_id = gate.start_run(PRINCIPAL)
    return gate.call(run_id, ToolCall(call_id="c1", tool="act", arguments={"n": 1})).result


def exit_code_of_child(body: Callable[[], bool]) -> int:
    """Run ``body`` in a forked child: 0 if it returned True, 1 if False, 2 if it raised."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        try:
            code = 0 if body() else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


# Python 3.12+ warns about fork() in a process with threads; that is this test's premise.
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_child_forked_after_a_timed_call_runs_its_own_timed_calls() -> None:
    assert call_once(timed_gate()) == {"n": 1}  # the parent's tool thread now exists, idle
    # Before the fork hook, the child's call waited for the parent's thread until its limit
    # and came back OutcomeUnknown.
    assert exit_code_of_child(lambda: call_once(timed_gate()) == {"n": 1}) == 0


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")
def test_a_child_does_not_see_the_parents_calls_as_in_flight() -> None:
    # Nobody runs the parent's call in the child: there its dispatched effect is of unknown
    # outcome, like any other process's, not "another resume here has it".
    dispatch.start_running("parent-key")
    try:
        assert exit_code_of_child(lambda: not dispatch.in_flight("parent-key")) == 0
    finally:
        dispatch.stop_running("parent-key")
