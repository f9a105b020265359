"""Randomised crash trials: kill a real process at a named crash point, recover, and check the
witness.

Each trial picks, from a printed seed, a crash point and occurrence and a fault for each tool
call (an exception, a timeout, a tool slower than its limit, a store write that fails because
another connection holds the database lock). It runs a multi-effect agent run in a forked
child with ``TETHER_CRASH_AT`` armed, so the child dies by SIGKILL; then it recovers and
approves in fresh children until the run completes, and checks against the ticket service's
own ``calls`` table that no side effect happened twice and none was lost.

    .venv/bin/python -m tests.crash.chaos --trials 2000 [--seed N]

The test suite runs a shorter series (tests/crash/test_chaos.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.core.lifecycle import RunStatus
from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.crash import ENV as CRASH_ENV
from tether.crash import POINTS, arm_from_environment
from tether.demo import TicketWorld
from tether.gate.desk import decide_approval
from tether.gate.settle import Result
from tether.models import Message, ModelToolCall
from tether.policy.constraints import ToolRule
from tether.policy.rules import Policy
from tether.runs.app import App
from tether.runs.recovery import recover
from tether.store import SQLiteStore
from tether.tools.registry import Registry, Risk, ToolSpec

TICKETS = ("T-1", "T-2", "T-3")
FAULTS = ("none", "none", "raise", "timeout", "slow", "lock")
PLAN_ENV = "TETHER_CHAOS_PLAN"
REVIEWER = "reviewer-5"


class FaultyWorld(TicketWorld):
    """The ticket service with one-shot faults: each planned fault fires on the first call
    for its ticket only, recorded in the service's own file so it survives the crash."""

    def __init__(self, path: Path, db_path: Path, plan: Mapping[str, str]) -> None:
        super().__init__(path)
        self.db_path = db_path
        self.plan = dict(plan)

    def fire_once(self, ticket: str) -> str:
        fault = self.plan.get(ticket, "none")
        if fault == "none":
            return "none"
        conn = self.connect()
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS fired (ticket TEXT PRIMARY KEY)")
            fresh = conn.execute("INSERT OR IGNORE INTO fired VALUES (?)", (ticket,)).rowcount
        finally:
            conn.close()
        return fault if fresh else "none"

    def close(self, ticket: str, operation_key: str) -> Result:
        fault = self.fire_once(ticket)
        if fault == "raise":
            raise RuntimeError(f"ticket service refused {ticket}")
        if fault == "timeout":
            raise TimeoutError(f"ticket service did not answer for {ticket}")
        if fault == "slow":
            time.sleep(0.4)  # past the tool's 0.15 s limit: the gate records "unknown"
        if fault == "lock":
            _hold_lock(self.db_path, seconds=0.6)  # tether's next commit will be refused
        value = self.invoke("close_ticket", {"ticket_id": ticket}, operation_key)
        return Result(value, external_reference=f"world:{operation_key}")


def _hold_lock(db_path: Path, seconds: float) -> None:
    ready = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(db_path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        ready.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    threading.Thread(target=hold, daemon=True).start()
    ready.wait(5)


class BatchModel:
    """Closes T-1 and T-2 in one turn (parallel calls), then T-3 (which needs approval),
    then answers. Decides from the conversation alone, so any process can resume it."""

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        turns = sum(1 for m in messages if m.role == "assistant")
        if turns == 0:
            return _calls(
                ("close-T-1", "close_ticket", "T-1"), ("close-T-2", "close_ticket", "T-2")
            )
        if turns == 1:
            return _calls(("escalate-T-3", "escalate_ticket", "T-3"))
        return Message(role="assistant", content="batch done")


def _calls(*specs: tuple[str, str, str]) -> Message:
    return Message(
        role="assistant",
        tool_calls=tuple(
            ModelToolCall(id=i, name=tool, arguments={"ticket_id": t}) for i, tool, t in specs
        ),
    )


def build_app(world: FaultyWorld) -> App:
    registry = Registry()

    def reconcile(operation_key: str) -> Result | None:
        done = world.applied(operation_key)
        return None if done is None else Result(done, external_reference=f"world:{operation_key}")

    @registry.tool(risk=Risk.WRITE, timeout_s=0.15, reconcile=reconcile)
    def close_ticket(ticket_id: str, operation_key: str) -> Result:
        """Close a ticket."""
        return world.close(ticket_id, operation_key)

    @registry.tool(risk=Risk.ADMIN, timeout_s=0.15, reconcile=reconcile)
    def escalate_ticket(ticket_id: str, operation_key: str) -> Result:
        """Close a ticket over its owner's head (needs approval)."""
        return world.close(ticket_id, operation_key)

    return App(
        registry=registry,
        policy=Policy(
            version="chaos-1",
            approvers=frozenset({REVIEWER}),
            tools={"close_ticket": ToolRule(verdict=Verdict.ALLOW)},
        ),
        model=BatchModel,
        principal=Principal(subject="agent-1", tenant="acme"),
    )


@dataclass
class Trial:
    seed: int
    point: str
    occurrence: int
    plan: dict[str, str]
    approve_armed: bool

    @classmethod
    def draw(cls, seed: int) -> Trial:
        rng = random.Random(seed)
        return cls(
            seed=seed,
            point=rng.choice(sorted(POINTS)),
            occurrence=rng.randint(1, 3),
            plan={t: rng.choice(FAULTS) for t in TICKETS},
            approve_armed=rng.random() < 0.3,
        )


@dataclass
class Outcome:
    trial: Trial
    status: str
    duplicates: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    untracked: list[str] = field(default_factory=list)
    audit_intact: bool = True
    crashed: bool = False
    rounds: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.status == RunStatus.COMPLETED.value
            and not self.duplicates
            and not self.lost
            and not self.untracked
            and self.audit_intact
        )


def _in_child(target: Callable[[], None], env: Mapping[str, str]) -> int:
    """Run ``target`` in a forked child with ``env`` applied; its exit code (-9 if killed)."""

    def main() -> None:
        os.environ.update(env)
        arm_from_environment()  # this child was forked after tether was imported
        try:
            target()
        except Exception:
            if os.environ.get("TETHER_CHAOS_VERBOSE"):
                import traceback

                traceback.print_exc()
            os._exit(3)
        os._exit(0)

    child = multiprocessing.get_context("fork").Process(target=main)
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
    return child.exitcode if child.exitcode is not None else -1


def run_trial(trial: Trial, directory: Path) -> Outcome:
    db = directory / "tether.db"
    url = f"sqlite:///{db}?busy_timeout=0.2"
    world_path = directory / "world.db"
    armed = {CRASH_ENV: f"{trial.point}:{trial.occurrence}"}

    def store() -> SQLiteStore:
        return SQLiteStore(url)

    def app() -> App:
        return build_app(FaultyWorld(world_path, db, trial.plan))

    def start() -> None:
        with store() as s:
            app().runner(s).start("close the batch", app().principal, run_id="run-chaos")

    outcome = Outcome(trial, status="")

    def child(target: Callable[[], None], env: Mapping[str, str]) -> None:
        if _in_child(target, env) == -9:
            outcome.crashed = True

    child(start, armed)
    for round_ in range(1, 9):
        outcome.rounds = round_
        with store() as s:
            run = next((r for r in s.list_runs() if r.run_id == "run-chaos"), None)
            pending = [a.approval_id for a in s.list_approvals() if a.status.value == "pending"]
        if run is None:  # died before the run was written: start it again, unarmed
            child(start, {})
            continue
        if run.status == RunStatus.COMPLETED.value:
            break
        if pending:

            def approve(ids: list[str] = pending) -> None:
                with store() as s:
                    for approval_id in ids:
                        decide_approval(s, approval_id, REVIEWER, approve=True, now=time.time())

            child(approve, armed if trial.approve_armed and not outcome.crashed else {})

        def resume() -> None:
            with store() as s:
                a = app()
                recover(s, lambda: a.runner(s))
                # an awaiting_approval run whose approvals are decided resumes too
                for r in s.list_runs(RunStatus.AWAITING_APPROVAL.value):
                    if not any(
                        x.status.value == "pending" for x in s.list_approvals(run_id=r.run_id)
                    ):
                        a.runner(s).resume(r.run_id)

        child(resume, armed if not outcome.crashed else {})
    return _judge(outcome, store, world_path)


def _judge(outcome: Outcome, store: Callable[[], SQLiteStore], world_path: Path) -> Outcome:
    with store() as s:
        run = next(r for r in s.list_runs() if r.run_id == "run-chaos")
        outcome.status = run.status
        effects = {e.operation_key: e for e in s.list_effects("run-chaos")}
        outcome.audit_intact = s.verify_audit().intact
    conn = FaultyWorld(world_path, Path(), {}).connect()  # creates the tables if never touched
    try:
        rows = conn.execute(
            "SELECT operation_key, count(*) FROM calls GROUP BY operation_key"
        ).fetchall()
    finally:
        conn.close()
    calls = dict(rows)
    outcome.duplicates = {k: n for k, n in calls.items() if n > 1}
    # Lost: the ledger says it happened, the world never saw it.
    outcome.lost = [k for k, e in effects.items() if e.status.took_effect and k not in calls]
    # Untracked: the world saw it, the ledger does not say it happened.
    outcome.untracked = [k for k in calls if k not in effects or not effects[k].status.took_effect]
    return outcome


def run_trials(trials: int, seed: int, report: Callable[[str], None] = print) -> list[Outcome]:
    report(f"chaos: {trials} trials from seed {seed}")
    rng = random.Random(seed)
    outcomes = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(trials):
            trial = Trial.draw(rng.randrange(2**32))
            directory = Path(d) / str(i)
            directory.mkdir()
            outcome = run_trial(trial, directory)
            outcomes.append(outcome)
            if not outcome.ok:
                report(f"FAILED trial seed={trial.seed}: {json.dumps(_describe(outcome))}")
    return outcomes


def _describe(o: Outcome) -> dict[str, Any]:
    return {
        "seed": o.trial.seed,
        "point": o.trial.point,
        "occurrence": o.trial.occurrence,
        "plan": o.trial.plan,
        "status": o.status,
        "duplicates": o.duplicates,
        "lost": o.lost,
        "untracked": o.untracked,
        "audit_intact": o.audit_intact,
        "rounds": o.rounds,
    }


def summary(outcomes: list[Outcome], seconds: float) -> dict[str, Any]:
    return {
        "trials": len(outcomes),
        "crashed": sum(o.crashed for o in outcomes),
        "completed": sum(o.status == RunStatus.COMPLETED.value for o in outcomes),
        "duplicates": sum(len(o.duplicates) for o in outcomes),
        "losses": sum(len(o.lost) + len(o.untracked) for o in outcomes),
        "audit_broken": sum(not o.audit_intact for o in outcomes),
        "failed_trials": sum(not o.ok for o in outcomes),
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="tether's randomised crash trials")
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    started = time.monotonic()
    outcomes = run_trials(args.trials, seed)
    result = summary(outcomes, time.monotonic() - started)
    print(json.dumps({"seed": seed, **result}))
    sys.exit(0 if result["failed_trials"] == 0 else 1)


if __name__ == "__main__":
    main()
