"""Durable runs from the command line: every step a separate process on one SQLite file, with
the demo app's ticket service as an independent witness of what really happened."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

APP = "tether.demo:support"


@dataclass
class Cli:
    tmp: Path

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("TETHER_APP", None)
        env["TETHER_DB"] = f"sqlite:///{self.tmp}/t.db"
        env["TETHER_DEMO_WORLD"] = str(self.tmp / "world.db")
        return env

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", *args],
            cwd=self.tmp,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, *args: str) -> Any:
        """Run a command that must succeed; the JSON on its last line."""
        out = self(*args)
        assert out.returncode == 0, out.stderr
        lines = [line for line in out.stdout.splitlines() if line.strip()]
        return json.loads(lines[-1])

    def witness(self, tool: str) -> list[dict[str, Any]]:
        """What the ticket service itself recorded: the arguments of every call to ``tool``."""
        conn = sqlite3.connect(self.tmp / "world.db")
        try:
            rows = conn.execute(
                "SELECT arguments_json FROM calls WHERE tool = ? ORDER BY seq", (tool,)
            ).fetchall()
            (count,) = conn.execute("SELECT count(*) FROM calls WHERE tool = ?", (tool,)).fetchone()
        finally:
            conn.close()
        assert count == len(rows)
        return [json.loads(r[0]) for r in rows]

    def waiting(self, message: str = "close ticket T-7") -> tuple[str, str]:
        """Start a run that stops for approval; its run id and approval id."""
        result = self.ok("run", "--app", APP, "--json", message)
        assert result["status"] == "awaiting_approval"
        [approval_id] = result["approvals"]
        return result["run_id"], approval_id

    def audit_intact(self) -> bool:
        return bool(self.ok("audit", "verify", "--json")["intact"])


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def assert_one_line_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_run_approve_and_resume_in_three_processes(cli: Cli) -> None:
    started = cli.ok("run", "--app", APP, "--json", "close ticket T-7")
    assert started["status"] == "awaiting_approval"
    assert [s["kind"] for s in started["steps"]] == ["tool_call", "approval_required"]
    [approval_id] = started["approvals"]
    assert approval_id.startswith("apr-")
    assert cli.witness("close_ticket") == []
    assert len(cli.witness("read_ticket")) == 1

    decided = cli.ok("approvals", "approve", approval_id, "--approver", "reviewer-5", "--json")
    assert (decided["status"], decided["approver"]) == ("approved", "reviewer-5")
    assert cli.witness("close_ticket") == []

    resumed = cli.ok("runs", "resume", started["run_id"], "--json")
    assert resumed["status"] == "completed"
    assert resumed["final"] == "Closed T-7."
    assert resumed["approvals"] == []
    assert [s["kind"] for s in resumed["steps"]] == [
        "tool_call",
        "approval_required",
        "approval_granted",
        "tool_call",
        "final",
    ]
    assert cli.witness("close_ticket") == [{"ticket_id": "T-7"}]
    assert len(cli.witness("read_ticket")) == 1  # the read was not repeated

    # A completed run cannot be resumed again, and nothing runs twice.
    again = cli("runs", "resume", started["run_id"])
    assert_one_line_error(again, "already completed")
    assert cli.witness("close_ticket") == [{"ticket_id": "T-7"}]
    assert cli.audit_intact()


def test_the_requester_cannot_approve_their_own_call(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    out = cli("approvals", "approve", approval_id, "--approver", "user-42")
    assert_one_line_error(out, "user-42")
    pending = cli.ok("approvals", "list", "--status", "pending", "--json")
    assert [a["approval_id"] for a in pending] == [approval_id]
    # Nobody else authorised either.
    out = cli("approvals", "approve", approval_id, "--approver", "mallory")
    assert_one_line_error(out, "mallory")
    assert cli.ok("runs", "show", run_id, "--json")["status"] == "awaiting_approval"
    assert cli.witness("close_ticket") == []
    assert cli.audit_intact()


def test_deny_with_a_reason_then_resume_tells_the_model(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    denied = cli.ok(
        "approvals",
        "deny",
        approval_id,
        "--approver",
        "reviewer-5",
        "--reason",
        "customer asked to keep it open",
        "--json",
    )
    assert (denied["status"], denied["reason"]) == ("denied", "customer asked to keep it open")
    resumed = cli.ok("runs", "resume", run_id, "--json")
    assert resumed["status"] == "completed"
    assert resumed["final"].startswith("I could not close T-7")
    assert "approval_denied" in resumed["final"]
    assert "customer asked to keep it open" in resumed["final"]
    assert "approval_denied" in [s["kind"] for s in resumed["steps"]]
    assert cli.witness("close_ticket") == []
    assert cli.audit_intact()


def test_deny_needs_a_reason(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    out = cli("approvals", "deny", approval_id, "--approver", "reviewer-5")
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert "--reason" in out.stderr
    pending = cli.ok("approvals", "list", "--status", "pending", "--json")
    assert [a["approval_id"] for a in pending] == [approval_id]


def test_an_edit_that_breaks_the_schema_is_refused_and_changes_nothing(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    out = cli(
        "approvals",
        "edit",
        approval_id,
        "--approver",
        "reviewer-5",
        "--arguments",
        '{"ticket_id": 7}',
    )
    assert_one_line_error(out, "ticket_id")
    pending = cli.ok("approvals", "list", "--status", "pending", "--json")
    assert [(a["approval_id"], a["arguments"]) for a in pending] == [
        (approval_id, {"ticket_id": "T-7"})
    ]
    assert len(cli.ok("approvals", "list", "--json")) == 1
    out = cli(
        "approvals", "edit", approval_id, "--approver", "reviewer-5", "--arguments", "not json"
    )
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert cli.witness("close_ticket") == []
    assert cli.audit_intact()


def test_an_edit_runs_the_edited_arguments_only(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    edited = cli.ok(
        "approvals",
        "edit",
        approval_id,
        "--approver",
        "reviewer-5",
        "--arguments",
        '{"ticket_id": "T-8"}',
        "--json",
    )
    assert edited["approval_id"] != approval_id
    assert edited["replaces"] == approval_id
    assert edited["arguments"] == {"ticket_id": "T-8"}
    assert edited["status"] == "approved"
    statuses = {a["approval_id"]: a["status"] for a in cli.ok("approvals", "list", "--json")}
    assert statuses == {approval_id: "edited", edited["approval_id"]: "approved"}
    assert cli.ok("approvals", "list", "--status", "pending", "--json") == []

    resumed = cli.ok("runs", "resume", run_id, "--json")
    assert resumed["status"] == "completed"
    assert cli.witness("close_ticket") == [{"ticket_id": "T-8"}]
    assert any(s["kind"] == "tool_call" and "T-8" in s["detail"] for s in resumed["steps"])
    assert cli.audit_intact()


def test_runs_list_and_show_and_approvals_list(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    other = cli.ok("run", "--app", APP, "--json", "what about ticket T-3?")
    assert other["status"] == "completed"

    listed = cli.ok("runs", "list", "--json")
    assert {r["run_id"]: r["status"] for r in listed} == {
        run_id: "awaiting_approval",
        other["run_id"]: "completed",
    }
    assert all("checkpoint_json" not in r for r in listed)
    assert all(r["principal_id"] == "user-42" for r in listed)
    waiting = cli.ok("runs", "list", "--status", "awaiting_approval", "--json")
    assert [r["run_id"] for r in waiting] == [run_id]

    shown = cli.ok("runs", "show", run_id, "--json")
    assert shown["run_id"] == run_id
    assert shown["status"] == "awaiting_approval"
    assert shown["approvals"] == [approval_id]
    assert [s["kind"] for s in shown["steps"]] == ["tool_call", "approval_required"]
    assert shown["principal"] == "user-42"
    assert shown["policy_version"] == "policy-3"
    assert shown["messages"] == 5  # system, user, read turn, its answer, the waiting turn
    assert shown["state_version"] > 1

    pending = cli.ok("approvals", "list", "--status", "pending", "--json")
    assert len(pending) == 1
    assert pending[0]["approval_id"] == approval_id
    assert pending[0]["run_id"] == run_id
    assert pending[0]["tool"] == "close_ticket"
    assert pending[0]["arguments"] == {"ticket_id": "T-7"}
    assert pending[0]["actor"] == "user-42"
    assert pending[0]["approvers"] == ["reviewer-5"]
    assert cli.ok("approvals", "list", "--status", "approved", "--json") == []


def test_resuming_an_unknown_run_is_a_clear_error(cli: Cli) -> None:
    out = cli("runs", "resume", "run-does-not-exist")
    assert_one_line_error(out, "no run run-does-not-exist")
    out = cli("runs", "resume", "run-does-not-exist", "--app", APP)
    assert_one_line_error(out, "no run run-does-not-exist")


def test_deciding_an_unknown_or_already_decided_approval_fails(cli: Cli) -> None:
    out = cli("approvals", "approve", "apr-nope", "--approver", "reviewer-5")
    assert_one_line_error(out, "apr-nope")
    _, approval_id = cli.waiting()
    cli.ok("approvals", "approve", approval_id, "--approver", "reviewer-5", "--json")
    out = cli("approvals", "approve", approval_id, "--approver", "reviewer-5")
    assert_one_line_error(out, "already approved")
    out = cli("approvals", "deny", approval_id, "--approver", "reviewer-5", "--reason", "no")
    assert_one_line_error(out, "already approved")
    assert cli.audit_intact()


def test_enqueue_then_a_worker_drives_the_run_and_rollback_undoes_it(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", *args],
            cwd=tmp_path,
            env={
                **os.environ,
                "TETHER_DB": f"sqlite:///{tmp_path}/t.db",
                "TETHER_DEMO_WORLD": str(tmp_path / "world.db"),
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    queued = json.loads(
        cli("run", "--app", APP, "--enqueue", "--json", "close ticket T-5").stdout.splitlines()[-1]
    )
    assert queued["status"] == "queued"
    worked = cli("worker", "--app", APP, "--exit-when-idle", "0.5", "--json")
    assert worked.returncode == 0, worked.stderr
    assert json.loads(worked.stdout.splitlines()[-1])["finished"] == {"awaiting_approval": 1}
    [pending] = json.loads(cli("approvals", "list", "--status", "pending", "--json").stdout)
    cli("approvals", "approve", pending["approval_id"], "--approver", "reviewer-5")
    shown = json.loads(cli("runs", "show", queued["run_id"], "--json").stdout)
    assert shown["status"] == "queued"  # every approval decided: any worker may pick it up
    assert cli("worker", "--app", APP, "--exit-when-idle", "0.5").returncode == 0
    shown = json.loads(cli("runs", "show", queued["run_id"], "--json").stdout)
    assert shown["status"] == "completed"
    undo = json.loads(cli("runs", "rollback", queued["run_id"], "--json").stdout.splitlines()[-1])
    assert undo["complete"] is False and len(undo["approvals"]) == 1
    cli("approvals", "approve", undo["approvals"][0], "--approver", "reviewer-5")
    done = json.loads(cli("runs", "rollback", queued["run_id"], "--json").stdout.splitlines()[-1])
    assert done["complete"] is True and len(done["compensated"]) == 1
    with sqlite3.connect(tmp_path / "world.db") as c:
        counts = dict(c.execute("SELECT tool, count(*) FROM calls GROUP BY tool").fetchall())
    assert counts == {"read_ticket": 1, "close_ticket": 1, "reopen_ticket": 1}
    assert cli("audit", "verify").returncode == 0


def test_unknown_crash_point_is_refused(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tether", "audit", "verify", "--db", f"sqlite:///{tmp_path}/t.db"],
        env={**os.environ, "TETHER_CRASH_AT": "no.such.point"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "unknown crash point 'no.such.point'" in out.stderr
