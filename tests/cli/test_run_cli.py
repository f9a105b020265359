"""Durable runs from the command line: every step a separate process on one SQLite file, with
the demo app's ticket service as an independent witness of what really happened."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

APP = "tether.demo:support"


@dataclass
class Cli:
    tmp: Path
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("TETHER_APP", "TETHER_APPROVER_TOKEN", "TETHER_PRINCIPAL_TOKEN"):
            env.pop(name, None)
        env["TETHER_DB"] = f"sqlite:///{self.tmp}/t.db"
        env["TETHER_DEMO_WORLD"] = str(self.tmp / "world.db")
        return env

    def admin(self) -> str:
        """The store's first administrator's credential (made on first use), which names
        approvers and principals: `tether admins add` on a store with none."""
        if ("admin", "") not in self.tokens:
            out = self.raw("admins", "add", "test-admin")
            assert out.returncode == 0, out.stderr
            self.tokens["admin", ""] = out.stdout.strip().splitlines()[-1]
        return self.tokens["admin", ""]

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        # Registering and revoking approvers and principals is an administrator's decision:
        # commands that do it carry the test's administrator unless a test says otherwise.
        if args[:1] in (("approvers",), ("principals",)) and args[1:2] in (("add",), ("revoke",)):
            env.setdefault("TETHER_ADMIN_TOKEN", self.admin())
        return self.raw(*args, **env)

    def raw(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tether", *args],
            cwd=self.tmp,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def ok(self, *args: str, **env: str) -> Any:
        """Run a command that must succeed; the JSON on its last line."""
        out = self(*args, **env)
        assert out.returncode == 0, out.stderr
        lines = [line for line in out.stdout.splitlines() if line.strip()]
        return json.loads(lines[-1])

    def token(self, name: str = "reviewer-5", tenant: str = "acme") -> str:
        """The credential of approver ``name`` (registered on first use), as a script gets it:
        the last line of ``tether approvers add``."""
        if (name, tenant) not in self.tokens:
            out = self("approvers", "add", name, "--tenant", tenant)
            assert out.returncode == 0, out.stderr
            self.tokens[name, tenant] = out.stdout.strip().splitlines()[-1]
        return self.tokens[name, tenant]

    def as_approver(
        self, name: str, *args: str, tenant: str = "acme"
    ) -> subprocess.CompletedProcess[str]:
        """A command run with approver ``name``'s credential in TETHER_APPROVER_TOKEN."""
        return self(*args, TETHER_APPROVER_TOKEN=self.token(name, tenant))

    def ok_as(self, name: str, *args: str) -> Any:
        return self.ok(*args, TETHER_APPROVER_TOKEN=self.token(name))

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

    decided = cli.ok_as("reviewer-5", "approvals", "approve", approval_id, "--json")
    assert (decided["status"], decided["approver"]) == ("approved", "reviewer-5")
    assert decided["approver_credential"].startswith("cred-")
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
    # A name alone is no longer an identity.
    out = cli("approvals", "approve", approval_id, "--approver", "reviewer-5")
    assert_one_line_error(out, "approver credential", "tether approvers add NAME --tenant T")
    # The requester's own approver credential: authenticated, and still the requester.
    out = cli.as_approver("user-42", "approvals", "approve", approval_id)
    assert_one_line_error(out, "user-42", "requested this call")
    pending = cli.ok("approvals", "list", "--status", "pending", "--json")
    assert [a["approval_id"] for a in pending] == [approval_id]
    # Nobody else the policy does not name either, and the refusal does not say who is.
    out = cli.as_approver("mallory", "approvals", "approve", approval_id)
    assert_one_line_error(out, "mallory")
    assert "reviewer-5" not in out.stderr
    assert cli.ok("runs", "show", run_id, "--json")["status"] == "awaiting_approval"
    assert cli.witness("close_ticket") == []
    assert cli.audit_intact()


def test_deny_with_a_reason_then_resume_tells_the_model(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    denied = cli.ok_as(
        "reviewer-5",
        "approvals",
        "deny",
        approval_id,
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
    out = cli.as_approver("reviewer-5", "approvals", "deny", approval_id)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "--reason" in out.stderr
    pending = cli.ok("approvals", "list", "--status", "pending", "--json")
    assert [a["approval_id"] for a in pending] == [approval_id]


def test_an_edit_that_breaks_the_schema_is_refused_and_changes_nothing(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    out = cli.as_approver(
        "reviewer-5", "approvals", "edit", approval_id, "--arguments", '{"ticket_id": 7}'
    )
    assert_one_line_error(out, "ticket_id")
    pending = cli.ok("approvals", "list", "--status", "pending", "--json")
    assert [(a["approval_id"], a["arguments"]) for a in pending] == [
        (approval_id, {"ticket_id": "T-7"})
    ]
    assert len(cli.ok("approvals", "list", "--json")) == 1
    out = cli.as_approver("reviewer-5", "approvals", "edit", approval_id, "--arguments", "not json")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "not valid JSON" in out.stderr
    out = cli.as_approver("reviewer-5", "approvals", "edit", approval_id, "--arguments", "[1]")
    assert out.returncode == 2 and "must be a JSON object" in out.stderr
    assert cli.witness("close_ticket") == []
    assert cli.audit_intact()


def test_an_edit_runs_the_edited_arguments_only(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    edited = cli.ok_as(
        "reviewer-5",
        "approvals",
        "edit",
        approval_id,
        "--arguments",
        '{"ticket_id": "T-8"}',
        "--json",
    )
    assert edited["approval_id"] != approval_id
    assert edited["replaces"] == approval_id
    assert edited["arguments"] == {"ticket_id": "T-8"}
    assert edited["status"] == "approved"
    assert edited["approver"] == "reviewer-5" and edited["approver_credential"]
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
    assert_one_line_error(out, "no tether store")  # and it made none
    assert not (cli.tmp / "t.db").exists()
    assert cli("migrate").returncode == 0
    out = cli("runs", "resume", "run-does-not-exist")
    assert_one_line_error(out, "no run run-does-not-exist")
    assert out.returncode == 2
    out = cli("runs", "resume", "run-does-not-exist", "--app", APP)
    assert_one_line_error(out, "no run run-does-not-exist")


def test_deciding_an_unknown_or_already_decided_approval_fails(cli: Cli) -> None:
    out = cli.as_approver("reviewer-5", "approvals", "approve", "apr-nope")
    assert_one_line_error(out, "apr-nope")
    assert out.returncode == 2
    _, approval_id = cli.waiting()
    cli.ok_as("reviewer-5", "approvals", "approve", approval_id, "--json")
    out = cli.as_approver("reviewer-5", "approvals", "approve", approval_id)
    assert_one_line_error(out, "already approved")
    out = cli.as_approver("reviewer-5", "approvals", "deny", approval_id, "--reason", "no")
    assert_one_line_error(out, "already approved")
    assert cli.audit_intact()


def test_enqueue_then_a_worker_drives_the_run_and_rollback_undoes_it(cli: Cli) -> None:
    def last(out: subprocess.CompletedProcess[str]) -> Any:
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.splitlines()[-1])

    queued = last(cli("run", "--app", APP, "--enqueue", "--json", "close ticket T-5"))
    assert queued["status"] == "queued"
    worked = last(cli("worker", "--app", APP, "--exit-when-idle", "0.5", "--json"))
    assert worked["finished"] == {"awaiting_approval": 1}
    [pending] = cli.ok("approvals", "list", "--status", "pending", "--json")
    cli.ok_as("reviewer-5", "approvals", "approve", pending["approval_id"], "--json")
    shown = cli.ok("runs", "show", queued["run_id"], "--json")
    assert shown["status"] == "queued"  # every approval decided: any worker may pick it up
    assert cli("worker", "--app", APP, "--exit-when-idle", "0.5").returncode == 0
    shown = cli.ok("runs", "show", queued["run_id"], "--json")
    assert shown["status"] == "completed"
    undo = last(cli("runs", "rollback", queued["run_id"], "--json"))
    assert undo["complete"] is False and len(undo["approvals"]) == 1
    cli.ok_as("reviewer-5", "approvals", "approve", undo["approvals"][0], "--json")
    done = last(cli("runs", "rollback", queued["run_id"], "--json"))
    assert done["complete"] is True and len(done["compensated"]) == 1
    with sqlite3.connect(cli.tmp / "world.db") as c:
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
