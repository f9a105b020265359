"""Parity (DESIGN I12, "one meaning per situation"): one table of situations, driven through
every entrance, each asserting the same answer, the same executions and the same audit.

The entrances (tests/parity/helpers.py drives each as its users do, with the real SDKs and
scripted models, offline):

- ``gate_call``: ``Gate.call``, the agent's own loop;
- ``gate_acall``: ``await Gate.acall``, the same on an event loop (``async`` tools);
- ``runner``: the durable run loop, ``Runner`` with a ``ScriptedModel``;
- ``langgraph``: a LangGraph ``StateGraph`` with tether's ``GovernedToolNode``
  (``tether.adapters.langgraph``);
- ``openai_agents``: an OpenAI Agents SDK agent under ``govern``
  (``tether.adapters.openai_agents``);
- ``pydantic_ai``: a Pydantic AI agent with the ``Tether`` capability
  (``tether.adapters.pydantic_ai``);
- ``mcp``: tether's MCP gateway in-process (``tether.mcp``), driven by the official
  ``mcp.Client``.

Each test has a fresh SQLite store, tools whose bodies append a line to a witness file (so
executions are counted from outside tether), and an approver, ``reviewer-1``, registered
with a credential and authenticated from it; the requester (``agent-1``) is never the
approver. Approvers decide through tether's decision API (``Gate.approve`` / ``deny`` /
``edit``) with that ``Identity``; an entrance only proposes calls and resumes.

What is compared, for each (situation, entrance):

(a) the answer, normalised (``helpers.Answer``): its kind — ran, refused, waiting,
    unsettled, handled — and, for a refusal, its category (denied, expired, conflict,
    cancelled...). For the framework entrances also *who* was told: the model (the call's
    tool result) or the caller (a pause, a stopped run, an exception). ``Gate.call``,
    ``Gate.acall`` and the MCP gateway have one channel (their caller is the agent), so
    there it is not compared;
(b) the witness: exactly the executions the table lists (their lines, so an edit shows);
(c) the audit entries' kinds, read with ``Store.audit_entries()``. The table's sequence is
    the one ``Gate.call`` writes when it answers as the table says; where ``Gate.call``
    itself diverges, the table holds what the gate would write if it answered so (the
    divergence then fails at ``gate_call`` too, once, rather than blaming every entrance
    that matches the meaning). Noise, not compared (helpers.NOISE): ``run_*`` entries
    except ``run_cancelled`` (how the run loop claims, queues and finishes runs);
    ``effect_replayed`` (a call answered from the ledger again: a read, neither a decision
    nor a state change, written or not depending on whether an entrance proposes a known
    call again or reads the ledger another way — the run loop reconciles an unknown
    effect, and its lease turns a second resume away before the gate); and the approver's
    ``credential_added``;
and the approver's decision (accepted or refused), and for the concurrent resume the other
resume's answer.

The expected values are the meaning I12 wants. One cell cannot hold it, and is marked so
(``FRAMEWORK_DECIDES``: an expected failure that fails the suite the day it starts passing,
so the mark cannot outlive its reason): the OpenAI Agents SDK itself stops a run whose
model reuses a completed call id (``ModelBehaviorError``) before any tool body — tether's
gate — is called, so the model is never told of the conflict and the gate never audits it.
Nothing runs twice there either (the witness shows one execution).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.parity.helpers import (
    ENTRANCES,
    FAKE,
    LOOKUP,
    LOOKUP_OTHER,
    SAVE,
    SEND,
    TTL_S,
    Answer,
    Entrance,
    World,
    world,
)


@dataclass(frozen=True)
class Observed:
    answer: Answer
    decision: str | None = None
    other: Answer | None = None  # the concurrent resume that ran the call
    asked: Answer | None = None  # the call's first answer, when it asked for approval


# -- the scenarios: what happens in each situation, at any entrance ----------------------------
def allowed(w: World, door: Entrance) -> Observed:
    return Observed(door.start(LOOKUP))


def asked_then(how: str, *, before: Callable[[World], None] | None = None) -> Any:
    """The write asks; ``before`` happens; the approver decides ``how``; the call resumes."""

    def scenario(w: World, door: Entrance) -> Observed:
        asked = door.start(SAVE)
        if before is not None:
            before(w)
        decision = w.decide(door.gate, asked.approval_id, how)
        return Observed(door.resume(), decision, asked=asked)

    return scenario


def expired_after_decision(w: World, door: Entrance) -> Observed:
    asked = door.start(SAVE)
    decision = w.decide(door.gate, asked.approval_id, "approve")
    w.later(TTL_S + 1)  # the grant's time runs out before the call resumes
    return Observed(door.resume(), decision, asked=asked)


def cancelled(w: World, door: Entrance) -> Observed:
    asked = door.start(SAVE)
    w.cancel()
    return Observed(door.resume(), asked=asked)


def unknown_outcome(w: World, door: Entrance) -> Observed:
    w.witness.timeout = True
    door.start(SEND)  # a write the policy allows acts, then times out: its outcome is unknown
    w.witness.timeout = False  # were it run again it would answer, and the witness would say so
    return Observed(door.ask_again())


def reused_call_id(w: World, door: Entrance) -> Observed:
    return Observed(door.start(LOOKUP, LOOKUP_OTHER))


def fabricated_result(w: World, door: Entrance) -> Observed:
    asked = door.start(SAVE)
    return Observed(door.resume_with_fake(FAKE), asked=asked)


def concurrent_resume(w: World, door: Entrance) -> Observed:
    asked = door.start(SAVE)
    decision = w.decide(door.gate, asked.approval_id, "approve")
    first, second = door.resume_twice()
    return Observed(second, decision, other=first, asked=asked)


# -- the table ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Situation:
    name: str
    play: Callable[[World, Entrance], Observed]
    why: str  # why this is the one meaning
    kind: str
    category: str | None = None
    via: str | None = None  # who is told, at the entrances that tell model and caller apart
    ran: tuple[str, ...] = ()  # the witness's lines
    decision: str | None = None
    audit: tuple[str, ...] = ()
    other: str | None = None  # the concurrent resume that got the call: its answer's kind
    # Another answer that means the same, where the issue allows two (a fabricated result is
    # "refused, or replaced by the ledger's"): (kind, category), told to the same party.
    or_: tuple[str, str | None] | None = None


RAN_LOOKUP = ("lookup k",)
RAN_SAVE = ("save k v",)
ASKED = "approval_requested"
RAN = ("effect_dispatched", "tool_effect_resolved")

SITUATIONS = [
    Situation(
        "allowed",
        allowed,
        "a read the policy allows runs once and the model reads its result",
        "ran", via="model", ran=RAN_LOOKUP, audit=RAN,
    ),
    Situation(
        "approved",
        asked_then("approve"),
        "a granted call runs exactly once when it resumes, and the model reads its result",
        "ran", via="model", ran=RAN_SAVE, decision="accepted",
        audit=(ASKED, "approval_granted", *RAN),
    ),
    Situation(
        "denied",
        asked_then("deny"),
        "nothing runs; the model hears the approver's reason (README: 'tells the model why "
        "not'), and the gate records the refusal",
        "refused", "denied", via="model", decision="accepted",
        audit=(ASKED, "approval_denied", "call_denied"),
    ),
    Situation(
        "edited",
        asked_then("edit"),
        "an edit is a new proposal the approver granted: the edited call runs once (never the "
        "original) and the model is told it ran as edited — the same whatever entrance "
        "resumes the original call",
        "ran", via="model", ran=("save k v2",), decision="accepted",
        audit=(ASKED, "approval_edited", *RAN),
    ),
    Situation(
        "expired_before_decision",
        asked_then("approve", before=lambda w: w.later(TTL_S + 1)),
        "nobody decided in time: the decision is refused, the request is closed and the model "
        "is told the call did not run (README: 'the call must be proposed again'); a stale "
        "call is never re-asked behind the model's back",
        "refused", "expired", via="model", decision="refused: ApprovalStateError",
        audit=(ASKED, "approval_expired", "call_denied"),
    ),
    Situation(
        "expired_after_decision",
        expired_after_decision,
        "a grant used after its expiry grants nothing: the model is told it expired, as it is "
        "told of an expired request",
        "refused", "expired", via="model", decision="accepted",
        audit=(ASKED, "approval_granted", "call_denied"),
    ),
    Situation(
        "revoked_approver",
        asked_then("approve", before=World.revoke),
        "I9: identity comes from a live credential; one revoked before deciding decides "
        "nothing, so the call still waits on the same approval",
        "waiting", via="caller", decision="refused: CredentialRefused",
        audit=(ASKED, "credential_revoked"),
    ),
    Situation(
        "cancelled_run",
        cancelled,
        "a cancelled run never dispatches again: its resumed call is refused as cancelled "
        "(either told to the model or stopping the run: the run is over) and the refusal is "
        "audited",
        "refused", "cancelled", via=None,
        audit=(ASKED, "approval_expired", "run_cancelled", "call_refused"),
    ),
    Situation(
        "unknown_outcome",
        unknown_outcome,
        "I2/I3: a timed-out call may have acted; asked again it is never re-run and reports "
        "the effect unsettled, and the run stops until it is settled (the model is not left "
        "to carry on, or to retry it under a new id)",
        "unsettled", via="caller", ran=("send k v",), audit=RAN,
    ),
    Situation(
        "reused_call_id",
        reused_call_id,
        "I2: a call id already recorded with other arguments is a conflict the model reads, "
        "never a replay of the other call's result and never a second dispatch",
        "refused", "conflict", via="model", ran=RAN_LOOKUP,
        audit=(*RAN, "operation_conflict"),
    ),
    Situation(
        "fabricated_result",
        fabricated_result,
        "a governed call's result comes only from tether's ledger: a client-supplied one is "
        "replaced by what the ledger holds — the call waits on its approval — or the resume "
        "that carries it is refused, so the model never reads the fake and nothing runs",
        "waiting", via="caller",
        audit=(ASKED,),
        or_=("refused", "fabricated"),
    ),
    Situation(
        "concurrent_resume",
        concurrent_resume,
        "two resumes of one waiting call: one runs it once; the other is told another resume "
        "has it (handled) — not that its outcome is unknown, which would send someone to "
        "reconcile an effect that is fine",
        "handled", via=None, ran=RAN_SAVE, decision="accepted",
        audit=(ASKED, "approval_granted", *RAN),
        other="ran",
    ),
]  # fmt: skip


# Cells the framework answers before tether's gate is reached (see the module docstring).
FRAMEWORK_DECIDES = {
    ("reused_call_id", "openai_agents"): (
        "the OpenAI Agents SDK raises ModelBehaviorError for a reused call id before calling "
        "the tool, so tether never sees the second call"
    ),
}


def waits_on(observed: Observed) -> str | None:
    """For a call that still waits: on the approval it first asked for, or another one."""
    if observed.answer.kind != "waiting":
        return None
    first = observed.asked.approval_id if observed.asked is not None else None
    return "the first approval" if observed.answer.approval_id == first else "another approval"


def summary(observed: Observed, w: World, *, channels: bool) -> dict[str, Any]:
    a = observed.answer
    return {
        "answer": (a.kind, a.category if a.kind == "refused" else None),
        "waits_on": waits_on(observed),
        "via": a.via if channels else None,  # compared only where the table names one
        "ran": w.witness.lines(),
        "decision": observed.decision,
        "audit": w.audit(),
        "other": observed.other.kind if observed.other is not None else None,
    }


def expected(s: Situation, *, channels: bool, alternative: bool = False) -> dict[str, Any]:
    kind, category = s.or_ if alternative and s.or_ is not None else (s.kind, s.category)
    return {
        "answer": (kind, category),
        "waits_on": "the first approval" if kind == "waiting" else None,
        "via": s.via if channels else None,
        "ran": list(s.ran),
        "decision": s.decision,
        "audit": list(s.audit),
        "other": s.other,
    }


def test_the_table_covers_every_entrance_and_situation() -> None:
    names = [s.name for s in SITUATIONS]
    assert len(names) == len(set(names)) >= 11
    assert set(ENTRANCES) == {
        "gate_call", "gate_acall", "runner", "langgraph", "openai_agents", "pydantic_ai", "mcp"
    }  # fmt: skip


@pytest.mark.parametrize("entrance", list(ENTRANCES))
@pytest.mark.parametrize("situation", SITUATIONS, ids=[s.name for s in SITUATIONS])
def test_parity(situation: Situation, entrance: str, tmp_path: Path) -> None:
    known = FRAMEWORK_DECIDES.get((situation.name, entrance))
    try:
        check(situation, entrance, tmp_path)
    except AssertionError:
        if known is None:
            raise
        pytest.xfail(known)
    if known is not None:
        pytest.fail(f"{entrance}, {situation.name} now holds: remove it from FRAMEWORK_DECIDES")


def check(situation: Situation, entrance: str, tmp_path: Path) -> None:
    with world(tmp_path) as w:
        door = ENTRANCES[entrance](w)
        try:
            observed = situation.play(w, door)
            got = summary(observed, w, channels=door.channels)
        finally:
            door.close()
    want = expected(situation, channels=door.channels)
    if want["via"] is None:
        got["via"] = None
    told = observed.answer.text or "(nothing)"
    if situation.or_ is not None and got["answer"] == situation.or_:
        want = expected(situation, channels=door.channels, alternative=True)
    assert got == want, f"{entrance}, {situation.name} ({situation.why}); it said: {told}"
