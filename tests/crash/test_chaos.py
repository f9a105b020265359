"""Crash tests: real processes killed with SIGKILL at every named crash point, then recovered.

The witness is the ticket service's own ``calls`` table, which records every handler
invocation: each side effect must appear there exactly once, and the ledger must agree.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.crash.chaos import Trial, run_trial, run_trials, summary
from tether.crash import POINTS

ROOT = Path(__file__).resolve().parents[2]
APP = "tether.demo:support"


def tether(d: Path, *args: str, crash: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TETHER_DB": f"sqlite:///{d}/t.db",
        "TETHER_DEMO_WORLD": str(d / "world.db"),
    }
    env.pop("TETHER_CRASH_AT", None)
    if args[:1] == ("approvals",):
        env["TETHER_APPROVER_TOKEN"] = approver_token(d, env)
    if crash is not None:
        env["TETHER_CRASH_AT"] = crash
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=d,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def approver_token(d: Path, env: dict[str, str]) -> str:
    """reviewer-5's credential for the store in ``d``, registered once (approving from a
    shell needs one: a typed name is not an identity)."""
    saved = d / "reviewer-5.token"
    if not saved.exists():
        tether = [sys.executable, "-m", "tether"]
        first = subprocess.run(
            [*tether, "admins", "add", "chaos-admin"],
            cwd=d,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        admin = first.stdout.strip().splitlines()[-1]
        out = subprocess.run(
            [*tether, "approvers", "add", "reviewer-5", "--tenant", "acme"],
            cwd=d,
            env={**env, "TETHER_ADMIN_TOKEN": admin},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        saved.write_text(out.stdout.strip().splitlines()[-1])
    return saved.read_text()


def last_json(out: subprocess.CompletedProcess[str]) -> object:
    # A killed process may print nothing or half a line: callers narrow what they got.
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


def witness(d: Path, tool: str) -> int:
    c = sqlite3.connect(d / "world.db")
    try:
        return int(c.execute("SELECT count(*) FROM calls WHERE tool = ?", (tool,)).fetchone()[0])
    finally:
        c.close()


@pytest.mark.parametrize("point", sorted(POINTS))
def test_demo_flow_killed_at_each_crash_point_recovers_exactly_once(
    tmp_path: Path, point: str
) -> None:
    killed = 0
    armed: str | None = point
    run_id = ""
    for _ in range(8):
        if not run_id:
            out = tether(tmp_path, "run", "--app", APP, "--json", "close ticket T-100", crash=armed)
            killed += out.returncode == -9
            data = last_json(out)
            if isinstance(data, dict):
                run_id = str(data["run_id"])
            else:
                runs = last_json(tether(tmp_path, "runs", "list", "--json"))
                assert runs is None or isinstance(runs, list), runs
                run_id = str(runs[0]["run_id"]) if runs else ""
        shown = last_json(tether(tmp_path, "runs", "show", run_id, "--json")) if run_id else None
        status = shown.get("status") if isinstance(shown, dict) else None
        if status == "completed":
            break
        if status == "awaiting_approval":
            pending = last_json(
                tether(tmp_path, "approvals", "list", "--status", "pending", "--json")
            )
            assert pending is None or isinstance(pending, list), pending
            for approval in pending or []:
                out = tether(tmp_path, "approvals", "approve", approval["approval_id"], crash=armed)
                killed += out.returncode == -9
            out = tether(tmp_path, "runs", "resume", run_id, "--json", crash=armed)
            killed += out.returncode == -9
        else:
            armed = None  # after a crash, recovery must finish the job unarmed
            out = tether(tmp_path, "recover", "--app", APP, "--json")
            assert out.returncode == 0, out.stderr
        if killed:
            armed = None
    if point != "recovery.after_reconcile":  # reached only when a crash left work unsettled
        assert killed == 1, f"{point} was never reached (or hit twice): killed={killed}"
    assert status == "completed"
    assert witness(tmp_path, "close_ticket") == 1
    assert tether(tmp_path, "audit", "verify").returncode == 0
    effects = last_json(tether(tmp_path, "effects", "list", "--json"))
    assert isinstance(effects, list)
    closes = [e for e in effects if e["tool_name"] == "close_ticket"]
    assert len(closes) == 1
    assert closes[0]["status"] in ("committed", "reconciled_committed")


@pytest.mark.parametrize("point", sorted(POINTS))
def test_multi_effect_run_killed_at_each_crash_point(tmp_path: Path, point: str) -> None:
    trial = Trial(
        seed=0,
        point=point,
        occurrence=1,
        plan={"T-1": "none", "T-2": "none", "T-3": "none"},
        approve_armed=point.startswith("approval."),
    )
    outcome = run_trial(trial, tmp_path)
    assert outcome.ok, outcome
    if point != "recovery.after_reconcile":  # only reached when something needs reconciling
        assert outcome.crashed, f"{point} was not reached in the multi-effect run"


# A developer's run repeats the same trials (a failure reproduces by running the test again);
# CI explores a new random seed each time and prints it, so a failure there replays with
# TETHER_CHAOS_SEED=<seed>.
FIXED_SEED = 1438093568


def chaos_seed() -> int:
    if "TETHER_CHAOS_SEED" in os.environ:
        return int(os.environ["TETHER_CHAOS_SEED"])
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        return random.randrange(2**31)
    return FIXED_SEED


@pytest.mark.slow
def test_randomised_trials(capsys: pytest.CaptureFixture[str]) -> None:
    trials = int(os.environ.get("TETHER_CHAOS_TRIALS", "200"))
    seed = chaos_seed()
    started = time.monotonic()
    with capsys.disabled():  # the seed goes to the log even when the test passes
        print(f"\nchaos: {trials} randomised trials, seed {seed} (TETHER_CHAOS_SEED replays it)")
    outcomes = run_trials(trials, seed, report=print)
    result = summary(outcomes, time.monotonic() - started)
    with capsys.disabled():
        print(json.dumps({"seed": seed, **result}))
    failures = [o for o in outcomes if not o.ok]
    assert not failures, f"seed {seed}: {len(failures)} failed trials, first: {failures[0]}"
    assert result["crashed"] > trials // 5, "too few trials actually crashed to mean anything"
    assert result["duplicates"] == 0 and result["losses"] == 0


def test_a_crash_during_recovery_is_recovered_too(tmp_path: Path) -> None:
    # The first crash leaves close_ticket dispatched after the service applied it; the
    # recovery that reconciles it is killed right after; a second recovery finishes.
    first = tether(tmp_path, "run", "--app", APP, "--json", "close ticket T-9")
    started = last_json(first)
    assert isinstance(started, dict), first.stdout
    run_id = str(started["run_id"])
    pending = last_json(tether(tmp_path, "approvals", "list", "--json"))
    assert isinstance(pending, list), pending
    [approval] = pending
    tether(tmp_path, "approvals", "approve", approval["approval_id"])
    died = tether(tmp_path, "runs", "resume", run_id, crash="gate.after_tool_return")
    assert died.returncode == -9
    assert witness(tmp_path, "close_ticket") == 1
    again = tether(tmp_path, "recover", "--app", APP, "--json", crash="recovery.after_reconcile")
    assert again.returncode == -9
    done = tether(tmp_path, "recover", "--app", APP, "--json")
    assert done.returncode == 0, done.stderr
    shown = last_json(tether(tmp_path, "runs", "show", run_id, "--json"))
    assert isinstance(shown, dict), shown
    assert shown["status"] == "completed"
    assert witness(tmp_path, "close_ticket") == 1
    assert tether(tmp_path, "audit", "verify").returncode == 0
