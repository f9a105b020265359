"""The command line's shape: what it imports to start, that human and JSON output stay apart,
tables, validated options, ``runs cancel`` and ``runs show --follow``. Every command runs as
a real subprocess on a real SQLite file (tests.cli.test_run_cli.Cli)."""

from __future__ import annotations

import ast
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_run_cli import APP, Cli, assert_one_line_error

SRC = Path(__file__).resolve().parents[2] / "src" / "tether"
# ``tether.cli.audit`` is loaded only when ``tether audit`` runs (``tether.cli.LAZY``), so it may
# import the audit machinery at its top; every other command module is on the cold path.
CLI_MODULES = [p for p in sorted((SRC / "cli").glob("*.py")) if p.name != "audit.py"]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def json_lines(text: str) -> list[str]:
    """The lines of ``text`` that are whole JSON documents."""
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("{", "[")):
            try:
                json.loads(stripped)
            except ValueError:
                continue
            found.append(stripped)
    return found


def one_json(out: subprocess.CompletedProcess[str]) -> Any:
    """A ``--json`` command's output: exactly one line, and it is JSON."""
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])


def human(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    assert json_lines(out.stdout) == [], out.stdout
    return out.stdout


# -- cold start ----------------------------------------------------------------------------------
# What the command tree may import while it is built: the standard library, click, and the
# command line's own modules. Everything else is imported inside the command that uses it.
LIGHT = {"click", "tether.cli.common", "tether.cli"}


def module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:  # only statements run at import, not those inside functions
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks never run
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: p.name)
def test_command_modules_import_nothing_heavy_at_module_level(path: Path) -> None:
    heavy = {
        m
        for m in module_level_imports(path)
        if (m.startswith("tether") or m in ("rich", "pydantic", "jsonschema"))
        and m not in LIGHT
        and not m.startswith("tether.cli.")
    }
    assert heavy == set(), f"{path.name} imports {heavy} at module level"


def test_building_the_command_tree_loads_no_store_gate_or_runs(tmp_path: Path) -> None:
    # The package's own __init__ may import much; this measures the command line alone by
    # giving it an empty ``tether`` package to live in.
    probe = f"""
import json, sys, types
pkg = types.ModuleType("tether")
pkg.__path__ = [{str(SRC)!r}]
sys.modules["tether"] = pkg
import tether.cli
try:
    tether.cli.main(["--help"], standalone_mode=False)
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("tether", "rich", "pydantic")))))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert loaded <= {"tether", "tether.cli.common"} | {
        f"tether.cli.{p.stem}" for p in CLI_MODULES if p.parent.name == "cli"
    } | {"tether.cli"}, loaded
    assert "audit" in out.stdout  # listed, though its module was not loaded


def test_spelled_out_choices_match_the_enums() -> None:
    from tether.cli.shared import APPROVAL_STATUSES, EFFECT_STATUSES, RUN_STATUSES, TOKEN_ENV
    from tether.core.approvals import ApprovalStatus
    from tether.core.ledger import EffectStatus
    from tether.core.lifecycle import RunStatus
    from tether.identity import TOKEN_ENV as IDENTITY_TOKEN_ENV

    assert list(RUN_STATUSES) == [s.value for s in RunStatus]
    assert list(APPROVAL_STATUSES) == [s.value for s in ApprovalStatus]
    assert list(EFFECT_STATUSES) == [s.value for s in EffectStatus]
    assert TOKEN_ENV == IDENTITY_TOKEN_ENV


def test_the_lazy_audit_group_is_described_as_it_describes_itself() -> None:
    from tether.cli import LAZY
    from tether.cli.audit import audit

    assert LAZY["audit"][2] == audit.get_short_help_str(limit=200)


# -- output --------------------------------------------------------------------------------------
def test_ages_and_spans() -> None:
    from tether.cli.output import age, span

    assert [span(s) for s in (0, 42, 60, 185, 7_200, 90_000)] == [
        "0s",
        "42s",
        "1m",
        "3m",
        "2h",
        "1d",
    ]
    assert age(1_000.0, now=1_180.0) == "3m ago"
    assert age(1_000.0, now=1_000.2) == "just now"
    assert age(4_600.0, now=1_000.0) == "in 1h"
    assert age(None) == "-"


def test_human_and_json_output_stay_apart(cli: Cli) -> None:
    # Human: no JSON line anywhere, from any command.
    text = human(cli("run", "--app", APP, "close ticket T-7"))
    assert "waiting for approval" in text and "tether approvals approve" in text
    assert "tether runs resume" in text
    [listed] = cli.ok("runs", "list", "--json")
    run_id = listed["run_id"]
    [pending] = cli.ok("approvals", "list", "--json")
    approval_id = pending["approval_id"]
    token = cli.token()
    for args in (
        ("runs", "list"),
        ("runs", "show", run_id),
        ("approvals", "list"),
        ("approvals", "show", approval_id),
        ("effects", "list"),
        ("approvers", "list"),
        ("principals", "list"),
        ("worker", "--app", APP, "--exit-when-idle", "0"),
        ("recover", "--app", APP),
    ):
        human(cli(*args))
    # JSON: exactly one line, carrying the fields scripts read.
    started = one_json(cli("run", "--app", APP, "--json", "close ticket T-8"))
    assert {"run_id", "status", "approvals", "steps", "final"} <= started.keys()
    assert one_json(cli("runs", "show", run_id, "--json"))["status"] == "awaiting_approval"
    assert {r["run_id"] for r in one_json(cli("runs", "list", "--json"))} >= {run_id}
    shown = one_json(cli("approvals", "show", approval_id, "--json"))
    assert (shown["risk"], shown["reasons"]) == ("write", ["tier write: ask"])
    assert one_json(cli("effects", "list", "--json"))[0]["status"] == "committed"
    assert one_json(cli("approvers", "list", "--json"))[0]["name"] == "reviewer-5"
    assert one_json(cli("worker", "--app", APP, "--exit-when-idle", "0", "--json"))["claimed"] == 0
    assert "runs_recovered" in one_json(cli("recover", "--app", APP, "--json"))
    approved = one_json(
        cli("approvals", "approve", approval_id, "--json", TETHER_APPROVER_TOKEN=token)
    )
    assert approved["status"] == "approved"


def test_demo_prints_json_only_when_asked(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    text = human(cli("demo"))
    assert "3. An agent under the gate." in text and "audit intact" in text
    summary = one_json(cli("demo", "--json"))
    assert summary["audit"]["intact"] is True


def test_lists_are_tables_with_headers_and_ages(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    runs = human(cli("runs", "list")).splitlines()
    assert runs[0].split() == ["run", "status", "principal", "tenant", "created", "updated"]
    [row] = [line for line in runs if line.startswith(run_id)]
    assert "awaiting_approval" in row and "user-42" in row and "acme" in row
    assert row.rstrip().endswith(("ago", "just now"))
    approvals = human(cli("approvals", "list")).splitlines()
    assert approvals[0].split()[:3] == ["approval", "status", "tool"]
    [row] = [line for line in approvals if line.startswith(approval_id)]
    assert "ticket_id=T-7" in row and run_id in row and "in 59m" in row
    effects = human(cli("effects", "list")).splitlines()
    assert effects[0].split()[:3] == ["operation", "key", "status"]
    assert any(line.startswith(f"{run_id}:") and "committed" in line for line in effects)
    assert human(cli("effects", "list", "--status", "failed")).strip() == "no effects recorded"
    assert "no failed runs" in human(cli("runs", "list", "--status", "failed"))


@pytest.mark.parametrize(
    "command",
    [("runs", "list"), ("approvals", "list"), ("effects", "list")],
    ids=" ".join,
)
def test_a_bad_status_names_the_valid_ones(cli: Cli, command: tuple[str, ...]) -> None:
    out = cli(*command, "--status", "bogus")
    assert out.returncode == 2
    assert "'bogus' is not one of" in out.stderr and "Traceback" not in out.stderr
    valid = {"runs": "awaiting_approval", "approvals": "pending", "effects": "dispatched"}
    assert valid[command[0]] in out.stderr
    assert not (cli.tmp / "t.db").exists()  # refused before anything was opened


def test_approvals_show_says_what_deciding_needs(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    text = human(cli("approvals", "show", approval_id))
    for needle in (
        f"approval {approval_id}: pending; expires in 59m",
        "close_ticket v",
        "risk tier  write",
        'arguments  {"ticket_id": "T-7"}',
        "digest     sha256:",
        "requested  by user-42 in tenant acme",
        f"run        {run_id}",
        "policy     policy-3; approvers: reviewer-5",
        "reasons    tier write: ask",
        f"tether approvals approve {approval_id}",
    ):
        assert needle in text, needle


def test_an_edit_says_which_approval_replaced_which(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    out = cli.as_approver(
        "reviewer-5", "approvals", "edit", approval_id, "--arguments", '{"ticket_id": "T-8"}'
    )
    text = human(out)
    [new_id] = [
        a["approval_id"] for a in cli.ok("approvals", "list", "--json") if a["status"] == "approved"
    ]
    assert f"approval {approval_id} replaced by {new_id}" in text
    assert f"tether runs resume {run_id}" in text
    assert "replaces   approval " + approval_id in human(cli("approvals", "show", new_id))


# -- runs cancel ---------------------------------------------------------------------------------
def audit_bodies(cli: Cli) -> list[dict[str, Any]]:
    with sqlite3.connect(cli.tmp / "t.db") as c:
        return [json.loads(r[0]) for r in c.execute("SELECT body FROM audit_log ORDER BY seq")]


def test_cancel_needs_an_approver_of_the_runs_tenant(cli: Cli) -> None:
    run_id, _ = cli.waiting()
    assert_one_line_error(cli("runs", "cancel", run_id), "TETHER_APPROVER_TOKEN")
    other = cli.as_approver("boss", "runs", "cancel", run_id, tenant="globex")
    assert_one_line_error(other, "may not cancel tenant acme's runs")
    assert cli.ok("runs", "show", run_id, "--json")["status"] == "awaiting_approval"


def test_cancel_closes_pending_approvals_in_one_audited_step(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    out = cli.as_approver("reviewer-5", "runs", "cancel", run_id, "--reason", "wrong ticket")
    text = human(out)
    assert f"run {run_id}: cancelled by reviewer-5" in text and approval_id in text
    assert cli.ok("runs", "show", run_id, "--json")["status"] == "cancelled"
    [closed] = cli.ok("approvals", "list", "--json")
    assert (closed["approval_id"], closed["status"]) == (approval_id, "expired")
    bodies = audit_bodies(cli)
    [expired] = [b for b in bodies if b["kind"] == "approval_expired"]
    assert expired["data"]["cause"] == "run_cancelled" and expired["actor"] == "reviewer-5"
    [cancelled] = [b for b in bodies if b["kind"] == "run_cancelled"]
    assert cancelled["data"]["reason"] == "wrong ticket"
    assert cancelled["data"]["closed_approvals"] == [approval_id]
    assert cancelled["data"]["credential_id"].startswith("cred-")
    assert cli.audit_intact()
    # Finished for good: not cancelled twice, not resumed, its approval not decidable.
    again = cli.as_approver("reviewer-5", "runs", "cancel", run_id)
    assert_one_line_error(again, "already cancelled")
    assert_one_line_error(cli("runs", "resume", run_id), "already cancelled")
    late = cli.as_approver("reviewer-5", "approvals", "approve", approval_id)
    assert_one_line_error(late, "already expired")
    assert cli.witness("close_ticket") == []
    assert_one_line_error(cli.as_approver("reviewer-5", "runs", "cancel", "run-nope"), "no run")


def test_cancel_a_queued_run_and_no_worker_takes_it(cli: Cli) -> None:
    queued = cli.ok("run", "--app", APP, "--enqueue", "--json", "close ticket T-5")
    done = one_json(
        cli("runs", "cancel", queued["run_id"], "--json", TETHER_APPROVER_TOKEN=cli.token())
    )
    assert (done["status"], done["closed_approvals"], done["lease_owner"]) == (
        "cancelled",
        [],
        None,
    )
    worked = cli.ok("worker", "--app", APP, "--exit-when-idle", "0.3", "--json")
    assert worked["claimed"] == 0
    assert not (cli.tmp / "world.db").exists()  # the agent never touched the ticket service


def test_cancel_run_refuses_a_finished_run_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.demo import support
    from tether.errors import RunStateError
    from tether.runs.cancel import cancel_run
    from tether.store import open_store

    monkeypatch.setenv("TETHER_DEMO_WORLD", str(tmp_path / "world.db"))
    with open_store(f"sqlite:///{tmp_path}/t.db") as store:
        app = support()
        result = app.runner(store).start("what about ticket T-3?", app.principal)
        assert result.status == "completed"
        entries = sum(1 for _ in store.audit_entries())
        with pytest.raises(RunStateError, match="already completed"):
            cancel_run(store, result.run_id, actor="reviewer-5", now=1.0)
        assert sum(1 for _ in store.audit_entries()) == entries
        with store.read() as tx:
            record = tx.get_run(result.run_id)
        assert record is not None and record.status == "completed"


# -- runs show --follow --------------------------------------------------------------------------
def follow(cli: Cli, run_id: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tether", "runs", "show", run_id, "--follow"],
        cwd=cli.tmp,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()  # printed once it is watching
    assert first.startswith(f"following run {run_id}"), first
    return process


def test_follow_prints_steps_as_they_happen_until_the_run_waits(cli: Cli) -> None:
    queued = cli.ok("run", "--app", APP, "--enqueue", "--json", "close ticket T-5")
    watcher = follow(cli, queued["run_id"])
    time.sleep(1.0)
    assert watcher.poll() is None  # nothing happened yet: still watching
    assert cli("worker", "--app", APP, "--exit-when-idle", "0.5").returncode == 0
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("[0] tool_call") and lines[1].startswith("[1] approval_required")
    assert f"run {queued['run_id']}: awaiting_approval" in out
    assert "tether approvals approve" in out and json_lines(out) == []


def test_ctrl_c_stops_following_quietly(cli: Cli) -> None:
    queued = cli.ok("run", "--app", APP, "--enqueue", "--json", "close ticket T-5")
    watcher = follow(cli, queued["run_id"])
    watcher.send_signal(signal.SIGINT)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 130
    assert err == "" and out == ""


def test_approvals_show_says_where_each_value_came_from(cli: Cli) -> None:
    from tests.gate.test_dataflow import POLICY, PRINCIPAL, registry
    from tether import Gate, SQLiteStore, ToolCall
    from tether.errors import ApprovalRequired

    with SQLiteStore(f"sqlite:///{cli.tmp}/t.db") as store:
        gate = Gate(registry([]), POLICY, store)
        run_id = gate.start_run(PRINCIPAL)
        gate.record_input(run_id, "Tell dave@corp.com I read the inbox")
        gate.call(run_id, ToolCall(call_id="c1", tool="read_inbox", arguments={"folder": "in"}))
        steered = {"to": "eve@evil.io", "body": "hello"}
        with pytest.raises(ApprovalRequired) as asked:
            gate.call(run_id, ToolCall(call_id="c2", tool="send_email", arguments=steered))
    approval_id = asked.value.approval_id
    text = human(cli("approvals", "show", approval_id))
    assert (
        "provenance to = \"eve@evil.io\": untrusted ('eve@evil.io'), first seen in the output "
        "of `read_inbox` call c1; not in the user's request"
    ) in text
    assert 'body = "hello": nothing to check' in text
    assert (
        "flow: argument 'to' ('eve@evil.io') first appeared in the output of `read_inbox`" in text
    )
    shown = one_json(cli("approvals", "show", approval_id, "--json"))
    assert [(p["argument"], p["trusted"], p["call_id"]) for p in shown["provenance"]] == [
        ("to", False, "c1"),
        ("body", True, None),
    ]


def test_follow_on_a_run_nothing_drives_says_so_and_returns(cli: Cli) -> None:
    from tether import SQLiteStore
    from tether.demo import support

    app = support()
    with SQLiteStore(f"sqlite:///{cli.tmp}/t.db") as store:
        # A run left `running` by a driver that is gone (no lease): nothing will move it.
        run_id = app.gate(store).start_run(app.principal)
    watcher = follow(cli, run_id)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert f"run {run_id} is running but nothing drives it" in out
    assert f"tether runs resume {run_id}" in out


def test_a_worker_says_it_started_and_each_run_it_claims_and_stops(cli: Cli) -> None:
    queued = cli.ok("run", "--app", APP, "--enqueue", "--json", "close ticket T-5")
    worked = cli("worker", "--app", APP, "--exit-when-idle", "0.3", "--json")
    stats = one_json(worked)  # stdout: the summary only, one JSON line
    assert stats["claimed"] == 1
    lines = worked.stderr.splitlines()
    assert lines[0].startswith("worker ") and f"driving runs of {APP}" in lines[0]
    assert any(line.endswith(f"claimed run {queued['run_id']}") for line in lines)
    assert any(line.endswith(f"run {queued['run_id']} awaiting_approval") for line in lines)
    quiet = cli("worker", "--app", APP, "--exit-when-idle", "0.3", "--json", "--quiet")
    assert one_json(quiet)["claimed"] == 0 and quiet.stderr == ""
