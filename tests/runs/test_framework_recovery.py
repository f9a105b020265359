"""`recover` settles the effects a crashed framework process left unsettled: a run made with
Gate.start_run and driven call by call (tests/runs/framework_app.py), killed with SIGKILL at a
crash point in a real child process, real SQLite. A witness file counts executions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.runs import framework_app
from tests.runs.framework_app import RUN_ID, WORLD_ENV, app, witness
from tether.core.ledger import EffectStatus
from tether.runs.recovery import recover
from tether.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(WORLD_ENV, str(tmp_path))
    return tmp_path


def db_of(world: Path) -> str:
    return f"sqlite:///{world / 'tether.db'}"


def run(*args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"TETHER_CRASH_AT": crash} if crash else {})}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def call(world: Path, tool: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    return run("-m", "tests.runs.framework_app", db_of(world), tool, crash=crash)


def killed_after(world: Path, tool: str, crash: str) -> None:
    killed = call(world, tool, crash)
    assert killed.returncode == -9, killed.stderr
    with SQLiteStore(db_of(world)) as store:
        (effect,) = store.list_effects(RUN_ID)
    assert effect.status is EffectStatus.DISPATCHED


def recover_now(world: Path, in_flight_s: float = 0.0) -> Any:
    with SQLiteStore(db_of(world)) as store:
        before = store.list_runs()
        report = recover(store, lambda: app.runner(store), in_flight_s=in_flight_s)
        after = store.list_runs()
        (effect,) = store.list_effects(RUN_ID)
    # Only the effect moved: no model turn, no status, no lease, no write of the run at all.
    assert after == before
    return report, effect


def test_a_reconcilable_effect_is_settled_committed_and_replayed(world: Path) -> None:
    killed_after(world, "charge", "gate.after_tool_return")
    assert len(witness()) == 1  # the charge happened; its outcome was never recorded
    report, effect = recover_now(world)
    assert effect.status is EffectStatus.RECONCILED_COMMITTED
    assert json.loads(effect.result_json or "null") == {"charged": 5}
    assert [(r.operation_key, r.settlement.value) for r in report.settled_effects[RUN_ID]] == [
        (effect.operation_key, "committed")
    ]
    assert report.recovered == {} and report.skipped == {}
    assert report.to_dict()["framework_effects_settled"] == {
        "committed": 1,
        "absent": 0,
        "unresolved": 0,
    }
    # The framework's process comes back and makes the same call: the ledger answers.
    again = call(world, "charge")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"result": {"charged": 5}, "replayed": True}
    assert len(witness()) == 1
    # Settled once: a second recover has nothing left to do.
    with SQLiteStore(db_of(world)) as store:
        assert recover(store, lambda: app.runner(store), in_flight_s=0).settled_effects == {}


def test_an_effect_known_absent_is_sent_again_once(world: Path) -> None:
    killed_after(world, "charge", "gate.after_dispatch_commit")  # the tool was never reached
    assert witness() == []
    report, effect = recover_now(world)
    assert effect.status is EffectStatus.RECONCILED_ABSENT
    assert report.settled_effects[RUN_ID][0].settlement.value == "absent"
    again = call(world, "charge")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"result": {"charged": 5}, "replayed": False}
    assert len(witness()) == 1


def test_an_effect_nothing_can_reconcile_stays_unknown_and_is_reported(world: Path) -> None:
    killed_after(world, "notify", "gate.after_tool_return")
    report, effect = recover_now(world)
    # Not guessed either way: unknown, for a human to resolve.
    assert effect.status is EffectStatus.UNKNOWN
    (settled,) = report.settled_effects[RUN_ID]
    assert settled.settlement.value == "unresolved"
    assert f"tether effects resolve {effect.operation_key}" in settled.detail
    again = call(world, "notify")
    assert again.returncode != 0
    assert "OutcomeUnknown" in again.stderr
    assert len(witness()) == 1


def test_a_recent_dispatch_may_still_be_in_flight_and_is_left_alone(world: Path) -> None:
    killed_after(world, "charge", "gate.after_tool_return")
    report, effect = recover_now(world, in_flight_s=300)
    assert effect.status is EffectStatus.DISPATCHED
    assert report.in_flight == {RUN_ID: [effect.operation_key]}
    assert report.settled_effects == {}


def test_the_command_settles_and_reports_framework_runs(world: Path) -> None:
    killed_after(world, "charge", "gate.after_tool_return")
    base = ["-m", "tether", "recover", "--app", "tests.runs.framework_app:app"]
    recent = run(*base, "--db", db_of(world))
    assert recent.returncode == 0, recent.stderr
    assert "maybe still in flight" in recent.stdout
    done = run(*base, "--db", db_of(world), "--in-flight", "0")
    assert done.returncode == 0, done.stderr
    assert "framework runs" in done.stdout and "committed 1" in done.stdout
    assert f"{RUN_ID}: " in done.stdout
    as_json = run(*base, "--db", db_of(world), "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["settled_effects"] == {}  # already settled
    with SQLiteStore(db_of(world)) as store:
        (effect,) = store.list_effects(RUN_ID)
    assert effect.status is EffectStatus.RECONCILED_COMMITTED
    assert len(framework_app.witness()) == 1
