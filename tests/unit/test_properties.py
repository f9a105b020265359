"""Property tests for the parts whose rules are small enough to state completely: the effect
state machine (I3), the audit hash chain, in memory and in a real SQLite file (I4), and the
policy decision (deny beats ask beats allow; decisions are pure)."""

from __future__ import annotations

import itertools
import re
import sqlite3
import tempfile
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tether.core.ledger import TRANSITIONS, Effect, EffectStatus, operation_key
from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.errors import InvalidTransition
from tether.evidence.audit import AuditEntry, AuditHead, make_entry, verify_chain
from tether.policy.constraints import Constraint, ToolRule
from tether.policy.rules import Policy, decide
from tether.store.sqlite import SQLiteStore
from tether.tools.registry import Manifest, Risk

S = EffectStatus

# -- (a) the effect state machine --------------------------------------------------------------
# The machine as designed, written out independently of tether.core.ledger. A call reconciled as
# absent never happened, so it may be dispatched again with the same key (the only cycle).
SPEC: dict[EffectStatus, set[EffectStatus]] = {
    S.DISPATCHED: {S.COMMITTED, S.FAILED, S.UNKNOWN},
    S.UNKNOWN: {S.RECONCILED_COMMITTED, S.RECONCILED_ABSENT},
    S.COMMITTED: set(),
    S.FAILED: set(),
    S.RECONCILED_COMMITTED: set(),
    S.RECONCILED_ABSENT: {S.DISPATCHED},
}
TERMINAL = {S.COMMITTED, S.FAILED, S.RECONCILED_COMMITTED}
# Simple paths (no state twice) from dispatched, where every effect starts, to a state with
# no way out.
COMPLETE_PATHS = {
    (S.DISPATCHED, S.COMMITTED),
    (S.DISPATCHED, S.FAILED),
    (S.DISPATCHED, S.UNKNOWN, S.RECONCILED_COMMITTED),
}
statuses = st.sampled_from(list(EffectStatus))


def new_effect(status: EffectStatus = S.DISPATCHED) -> Effect:
    return Effect(
        operation_key=operation_key("run-1", "call-1", "tool", "1"),
        run_id="run-1",
        call_id="call-1",
        tool_name="tool",
        tool_version="1",
        argument_digest="sha256:00",
        status=status,
        attempts=1,
        created_at=1.0,
        updated_at=1.0,
    )


def test_transition_table_is_the_designed_machine() -> None:
    assert set(TRANSITIONS) == set(EffectStatus)
    assert {s: set(t) for s, t in TRANSITIONS.items()} == SPEC
    assert {s for s in EffectStatus if s.terminal} == TERMINAL
    assert {s for s in EffectStatus if s.took_effect} == {S.COMMITTED, S.RECONCILED_COMMITTED}


def test_reachable_states_and_complete_paths() -> None:
    seen, queue = {S.DISPATCHED}, deque([S.DISPATCHED])
    while queue:
        for nxt in TRANSITIONS[queue.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    assert seen == set(EffectStatus)

    def paths(path: tuple[EffectStatus, ...]) -> set[tuple[EffectStatus, ...]]:
        following = TRANSITIONS[path[-1]]
        if not following:
            return {path}
        fresh = [n for n in following if n not in path]
        return set().union(set(), *(paths((*path, n)) for n in fresh))

    assert paths((S.DISPATCHED,)) == COMPLETE_PATHS
    assert set(TRANSITIONS[S.RECONCILED_ABSENT]) == {S.DISPATCHED}
    assert all(path[-1].terminal for path in COMPLETE_PATHS)


@settings(max_examples=200)
@given(start=statuses, targets=st.lists(statuses, max_size=12))
def test_any_sequence_of_targets(start: EffectStatus, targets: list[EffectStatus]) -> None:
    effect = new_effect(start)
    for i, target in enumerate(targets):
        before = effect
        now = 2.0 + i
        if target in SPEC[before.status]:
            effect = before.advance(target, now, attempts=before.attempts + 1)
            assert target in TRANSITIONS[before.status]
            assert effect.status is target
            assert effect.updated_at == now
            assert effect.attempts == before.attempts + 1
            assert (
                replace(
                    effect,
                    status=before.status,
                    updated_at=before.updated_at,
                    attempts=before.attempts,
                )
                == before
            )
        else:
            with pytest.raises(InvalidTransition):
                before.advance(target, now)
            assert effect == before
        if effect.status.terminal:
            for other in EffectStatus:
                with pytest.raises(InvalidTransition):
                    effect.advance(other, now)


def path_without_retries(path: list[EffectStatus]) -> tuple[EffectStatus, ...]:
    """The path with each absent-then-retried detour (dispatched…absent) cut out."""
    out: list[EffectStatus] = []
    for status in path:
        if status is S.DISPATCHED and S.DISPATCHED in out:
            out = out[: out.index(S.DISPATCHED)]
        out.append(status)
    return tuple(out)


class EffectMachine(RuleBasedStateMachine):
    """Drive one effect with arbitrary targets; the path taken must always be a walk of the
    designed machine, and terminal states must refuse everything."""

    def __init__(self) -> None:
        super().__init__()
        self.effect = new_effect()
        self.path: list[EffectStatus] = [S.DISPATCHED]
        self.now = 1.0

    @rule(to=statuses, dt=st.floats(min_value=0, max_value=1e6, allow_nan=False))
    def advance(self, to: EffectStatus, dt: float) -> None:
        self.now += dt
        allowed = to in SPEC[self.effect.status]
        try:
            after = self.effect.advance(to, self.now)
        except InvalidTransition:
            assert not allowed, f"{self.effect.status} -> {to} was refused"
            return
        assert allowed, f"{self.effect.status} -> {to} was accepted"
        assert to in TRANSITIONS[self.effect.status]
        self.effect = after
        self.path.append(to)

    @rule()
    def restart(self) -> None:
        self.effect, self.path = new_effect(), [S.DISPATCHED]

    @invariant()
    def path_is_a_designed_walk(self) -> None:
        path = tuple(self.path)
        assert path[0] is S.DISPATCHED
        assert all(b in SPEC[a] for a, b in itertools.pairwise(path)), path
        assert self.effect.status is path[-1]

    @invariant()
    def terminal_states_accept_nothing(self) -> None:
        if self.effect.status.terminal:
            assert path_without_retries(self.path) in COMPLETE_PATHS
            for other in EffectStatus:
                with pytest.raises(InvalidTransition):
                    self.effect.advance(other, self.now)


EffectMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=15)
TestEffectMachine = EffectMachine.TestCase


# -- (b) the audit chain -----------------------------------------------------------------------
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=8)
)
entry_specs = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["run_started", "effect_dispatched", "call_denied", "x"]),
        "run_id": st.one_of(st.none(), st.sampled_from(["run-1", "run-2"])),
        "actor": st.one_of(st.none(), st.text(min_size=1, max_size=6)),
        "at": st.floats(min_value=0, max_value=2e9, allow_nan=False),
        "data": st.dictionaries(st.text(max_size=5), json_scalars, max_size=3),
        "redactions": st.lists(st.sampled_from(["password", "token", "api_key"]), max_size=2),
    }
)


def build_chain(specs: list[dict[str, Any]]) -> tuple[list[AuditEntry], AuditHead | None]:
    entries: list[AuditEntry] = []
    head: AuditHead | None = None
    for spec in specs:
        entry = make_entry(head, **spec)
        entries.append(entry)
        head = AuditHead(entry.seq, entry.hash)
    return entries, head


def head_after(entries: list[AuditEntry], count: int) -> AuditHead | None:
    return None if count == 0 else AuditHead(entries[count - 1].seq, entries[count - 1].hash)


chains = st.lists(entry_specs, min_size=1, max_size=10)


@settings(max_examples=100)
@given(specs=st.lists(entry_specs, max_size=10))
def test_an_untouched_chain_verifies(specs: list[dict[str, Any]]) -> None:
    entries, head = build_chain(specs)
    report = verify_chain(entries, head)
    assert report.intact, report.summary()
    assert report.entries == len(specs)
    assert report.first_bad is None
    assert [e.seq for e in entries] == list(range(1, len(specs) + 1))


@dataclass(frozen=True)
class Mutation:
    name: str
    entries: list[AuditEntry]
    first_bad: int


@st.composite
def mutations(draw: st.DrawFn) -> tuple[list[AuditEntry], AuditHead | None, Mutation]:
    entries, head = build_chain(draw(chains))
    n = len(entries)
    kind = draw(st.sampled_from(["edit", "delete", "insert", "truncate"] + ["swap"] * (n > 1)))
    if kind == "edit":
        i = draw(st.integers(0, n - 1))
        body = entries[i].body
        pos = draw(st.integers(0, len(body) - 1))
        char = draw(st.characters(codec="utf-8").filter(lambda c: c != body[pos]))
        edited = replace(entries[i], body=body[:pos] + char + body[pos + 1 :])
        return entries, head, Mutation(kind, [*entries[:i], edited, *entries[i + 1 :]], i + 1)
    if kind == "delete":
        i = draw(st.integers(0, n - 1))
        # The first entry that no longer verifies is the one after the gap; with the last
        # entry gone, it is the missing sequence number the head still vouches for.
        expected = n if i == n - 1 else i + 2
        return entries, head, Mutation(kind, [*entries[:i], *entries[i + 1 :]], expected)
    if kind == "insert":
        # Appending after the last entry is checked separately below.
        i = draw(st.integers(0, n - 1))
        spec: dict[str, Any] = {**draw(entry_specs), "kind": "forged"}
        forged = make_entry(head_after(entries, i), **spec)
        return entries, head, Mutation(kind, [*entries[:i], forged, *entries[i:]], i + 1)
    if kind == "swap":
        pair = draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
        i, j = sorted(pair)
        swapped = list(entries)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        # The first stored entry out of place is entry j+1, now sitting at position i.
        return entries, head, Mutation(kind, swapped, j + 1)
    cut = draw(st.integers(1, n))
    return entries, head, Mutation(kind, entries[: n - cut], n - cut + 1)


@settings(max_examples=300)
@given(case=mutations())
def test_any_single_mutation_is_detected_at_the_right_entry(
    case: tuple[list[AuditEntry], AuditHead | None, Mutation],
) -> None:
    entries, head, mutation = case
    assert verify_chain(entries, head).intact
    report = verify_chain(mutation.entries, head)
    assert not report.intact, f"{mutation.name} went unnoticed"
    assert report.first_bad == mutation.first_bad, (mutation.name, report.summary())
    assert report.problem


@settings(max_examples=50)
@given(specs=chains, forged_spec=entry_specs)
def test_a_forged_entry_appended_after_the_head_is_named(
    specs: list[dict[str, Any]], forged_spec: dict[str, Any]
) -> None:
    entries, head = build_chain(specs)
    forged = make_entry(head, **{**forged_spec, "kind": "forged"})
    report = verify_chain([*entries, forged], head)
    assert not report.intact
    # The entry the head does not vouch for is the forged one, not the last genuine entry.
    assert report.first_bad == forged.seq == len(entries) + 1, report.summary()


# -- (c) the audit chain in a real SQLite file -------------------------------------------------
def _raw(path: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(sql, params)


def _append(store: SQLiteStore, batches: list[list[dict[str, Any]]]) -> None:
    for batch in batches:
        with store.transaction() as tx:
            for spec in batch:
                tx.append_audit(
                    spec["kind"],
                    at=spec["at"],
                    run_id=spec["run_id"],
                    actor=spec["actor"],
                    data=spec["data"],
                    redactions=spec["redactions"],
                )


@st.composite
def sqlite_cases(draw: st.DrawFn) -> tuple[list[list[dict[str, Any]]], str, int, int]:
    batches = draw(st.lists(st.lists(entry_specs, min_size=1, max_size=4), min_size=1, max_size=4))
    n = sum(len(b) for b in batches)
    kind = draw(st.sampled_from(["edit_body", "edit_kind", "delete_last", "delete_one"]))
    seq = n if kind == "delete_last" else draw(st.integers(1, n))
    return batches, kind, seq, draw(st.integers(0, 10**6))


@settings(max_examples=25, deadline=None)
@given(case=sqlite_cases())
def test_tampering_with_the_sqlite_file_is_detected(
    case: tuple[list[list[dict[str, Any]]], str, int, int],
) -> None:
    batches, kind, seq, salt = case
    n = sum(len(b) for b in batches)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "audit.db")
        with SQLiteStore(f"sqlite:///{path}", synchronous="normal") as store:
            _append(store, batches)
            before = store.verify_audit()
            assert before.intact, before.summary()
            assert before.entries == n
            (body,) = [e.body for e in store.audit_entries() if e.seq == seq]
            if kind == "edit_body":
                pos = salt % len(body)
                char = "A" if body[pos] != "A" else "B"
                _raw(
                    path,
                    "UPDATE audit_log SET body = ? WHERE seq = ?",
                    (body[:pos] + char + body[pos + 1 :], seq),
                )
                expected = seq
            elif kind == "edit_kind":
                _raw(path, "UPDATE audit_log SET kind = kind || '!' WHERE seq = ?", (seq,))
                expected = seq
            elif kind == "delete_last":
                _raw(path, "DELETE FROM audit_log WHERE seq = (SELECT max(seq) FROM audit_log)")
                expected = n
            else:
                _raw(path, "DELETE FROM audit_log WHERE seq = ?", (seq,))
                expected = n if seq == n else seq + 1
            report = store.verify_audit()
            assert not report.intact, f"{kind} of entry {seq} went unnoticed"
            assert report.first_bad == expected, (kind, seq, report.summary())
        # A fresh process opening the file sees the same thing.
        with SQLiteStore(f"sqlite:///{path}") as reopened:
            again = reopened.verify_audit()
            assert (again.intact, again.first_bad) == (False, expected)


# -- (d) the policy decision -------------------------------------------------------------------
SEVERITY = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.DENY: 2}
TENANTS = ["acme", "globex"]
SCOPES = ["tickets:read", "tickets:write", "admin"]
verdicts = st.sampled_from(list(Verdict))


def strictest(*vs: Verdict) -> Verdict:
    return max(vs, key=SEVERITY.__getitem__)


principals = st.builds(
    Principal,
    subject=st.sampled_from(["alice", "bob", "agent-7"]),
    tenant=st.sampled_from(TENANTS),
    scopes=st.frozensets(st.sampled_from(SCOPES)),
)
manifests = st.builds(
    Manifest,
    name=st.sampled_from(["close_ticket", "read_ticket"]),
    parameters=st.just({"type": "object", "properties": {"tenant": {"type": "string"}}}),
    tenant_path=st.just("tenant"),
    risk=st.sampled_from(list(Risk)),
    required_scope=st.one_of(st.none(), st.sampled_from(SCOPES)),
    allowed_tenants=st.one_of(st.none(), st.frozensets(st.sampled_from(TENANTS))),
)
constraints = st.one_of(
    st.builds(
        Constraint,
        argument=st.just("amount"),
        op=st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
        value=st.integers(-5, 5),
    ),
    st.builds(
        Constraint,
        argument=st.just("amount"),
        op=st.sampled_from(["in", "not_in"]),
        value=st.lists(st.integers(-5, 5), max_size=3),
    ),
    st.builds(
        Constraint,
        argument=st.just("queue"),
        op=st.just("matches"),
        value=st.sampled_from(["q[0-9]", "support", ".*"]),
    ),
)
rules = st.builds(
    ToolRule,
    verdict=st.one_of(st.none(), verdicts),
    constraints=st.lists(constraints, max_size=3).map(tuple),
)
policies = st.builds(
    Policy,
    version=st.sampled_from(["p1", "p2"]),
    tiers=st.dictionaries(st.sampled_from(list(Risk)), verdicts),
    tools=st.dictionaries(st.sampled_from(["close_ticket", "read_ticket"]), rules, max_size=2),
    on_injection=verdicts,
)
arguments = st.fixed_dictionaries(
    {},
    optional={
        "tenant": st.sampled_from(TENANTS),
        "amount": st.one_of(st.integers(-6, 6), st.just("lots")),
        "queue": st.sampled_from(["q1", "support", "billing"]),
        "note": st.text(max_size=6),
    },
)
flag_sets = st.lists(st.sampled_from(["injection pattern in 'note'", "invisible"]), max_size=2)

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "in": lambda a, b: a in b,
    "not_in": lambda a, b: a not in b,
    "matches": lambda a, b: isinstance(a, str) and re.fullmatch(b, a) is not None,
}


def _breaks(c: Constraint, args: Mapping[str, Any]) -> bool:
    if c.argument not in args:
        return True
    try:
        return not _OPS[c.op](args[c.argument], c.value)
    except TypeError:
        return True


def expected_verdict(
    policy: Policy, who: Principal, manifest: Manifest, args: Mapping[str, Any], flags: list[str]
) -> Verdict:
    """The decision rules of policy.py's docstring and DESIGN.md, restated as an oracle."""
    rule = policy.tools.get(manifest.name)
    denied = (
        (manifest.required_scope is not None and manifest.required_scope not in who.scopes)
        or (manifest.tenant_path == "tenant" and args.get("tenant") != who.tenant)
        or (manifest.allowed_tenants is not None and who.tenant not in manifest.allowed_tenants)
        or (rule is not None and any(_breaks(c, args) for c in rule.constraints))
    )
    if denied:
        return Verdict.DENY
    if rule is not None and rule.verdict is not None:
        verdict = rule.verdict
    else:
        verdict = policy.tiers.get(manifest.risk, Verdict.DENY)
    if manifest.risk is Risk.IRREVERSIBLE:
        verdict = strictest(verdict, Verdict.ASK)
    if flags:
        verdict = strictest(verdict, policy.on_injection)
    return verdict


@settings(max_examples=300)
@given(policy=policies, who=principals, manifest=manifests, args=arguments, flags=flag_sets)
def test_decide_is_deterministic_and_deny_beats_ask_beats_allow(
    policy: Policy, who: Principal, manifest: Manifest, args: dict[str, Any], flags: list[str]
) -> None:
    decision = decide(policy, who, manifest, args, tuple(flags))
    again = decide(policy, replace(who), manifest, dict(args), tuple(flags))
    assert decision == again
    assert decision.policy_version == policy.version
    assert decision.reasons
    assert decision.verdict is expected_verdict(policy, who, manifest, args, flags)
    if manifest.risk is Risk.IRREVERSIBLE:
        assert decision.verdict is not Verdict.ALLOW
    if flags:
        assert SEVERITY[decision.verdict] >= SEVERITY[policy.on_injection]


@settings(max_examples=200)
@given(policy=policies, who=principals, manifest=manifests, args=arguments, flags=flag_sets)
def test_more_evidence_never_makes_a_decision_more_permissive(
    policy: Policy, who: Principal, manifest: Manifest, args: dict[str, Any], flags: list[str]
) -> None:
    base = SEVERITY[decide(policy, who, manifest, args, tuple(flags)).verdict]
    flagged = decide(policy, who, manifest, args, (*flags, "invisible characters in 'x'"))
    assert SEVERITY[flagged.verdict] >= base
    fewer_scopes = replace(who, scopes=frozenset())
    assert SEVERITY[decide(policy, fewer_scopes, manifest, args, tuple(flags)).verdict] >= base
    other_tenant = next(t for t in TENANTS if t != who.tenant)
    foreign = decide(policy, who, manifest, {**args, "tenant": other_tenant}, tuple(flags))
    assert foreign.verdict is Verdict.DENY
    assert any(other_tenant in r for r in foreign.reasons)
    assert decide(None, who, manifest, args, tuple(flags)).verdict is Verdict.DENY
    assert decide(policy, who, None, args, tuple(flags)).verdict is Verdict.DENY


@settings(max_examples=100)
@given(policy=policies, who=principals, flags=flag_sets)
def test_irreversible_tools_always_ask_whatever_the_policy_says(
    policy: Policy, who: Principal, flags: list[str]
) -> None:
    manifest = Manifest(name="wipe", parameters={"type": "object"}, risk=Risk.IRREVERSIBLE)
    permissive = replace(
        policy,
        tiers={**policy.tiers, Risk.IRREVERSIBLE: Verdict.ALLOW},
        tools={"wipe": ToolRule(verdict=Verdict.ALLOW)},
    )
    for p in (policy, permissive):
        decision = decide(p, who, manifest, {}, tuple(flags))
        assert decision.verdict is not Verdict.ALLOW, decision
        assert decision.verdict is expected_verdict(p, who, manifest, {}, flags)
