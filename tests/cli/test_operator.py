"""Operator mistakes are refused, not guessed; identities come from credentials (I9).

Every test drives the real ``tether`` command in a subprocess, as an operator would."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_run_cli import APP, Cli, assert_one_line_error


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in out.stdout.splitlines() if line.strip()]


def checkpoint(cli: Cli, run_id: str) -> dict[str, Any]:
    with sqlite3.connect(cli.tmp / "t.db") as c:
        (body,) = c.execute(
            "SELECT checkpoint_json FROM agent_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
    data: dict[str, Any] = json.loads(body)
    return data


# -- stores are created only by commands that start work -----------------------------------------
NEVER_CREATE = [
    ("runs", "list"),
    ("runs", "show", "run-x"),
    ("runs", "resume", "run-x", "--app", APP),
    ("runs", "rollback", "run-x", "--app", APP),
    ("effects", "list"),
    ("effects", "resolve", "k", "--committed"),
    ("approvals", "list"),
    ("approvals", "show", "apr-x"),
    ("approvals", "approve", "apr-x", "--approver", "reviewer-5"),
    ("approvals", "deny", "apr-x", "--approver", "reviewer-5", "--reason", "no"),
    ("approvals", "edit", "apr-x", "--approver", "reviewer-5", "--arguments", "{}"),
    ("recover", "--app", APP),
    ("approvers", "list"),
    ("approvers", "revoke", "reviewer-5"),
    ("principals", "list"),
]


@pytest.mark.parametrize("command", NEVER_CREATE, ids=" ".join)
def test_a_command_on_an_existing_store_never_creates_one(
    cli: Cli, command: tuple[str, ...]
) -> None:
    missing = cli.tmp / "nope" / "x.db"
    token = "tth_cred-0123456789abcdef_" + "A" * 43
    out = cli(*command, "--db", f"sqlite:///{missing}", TETHER_APPROVER_TOKEN=token)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert not missing.exists() and not missing.parent.exists()


def test_adding_an_approver_creates_the_store(cli: Cli) -> None:
    out = cli("approvers", "add", "reviewer-5", "--tenant", "acme")
    assert out.returncode == 0, out.stderr
    assert (cli.tmp / "t.db").exists()
    [token] = lines(out)  # the credential, alone: TOKEN=$(tether approvers add …) just works
    assert token.startswith("tth_cred-")
    assert "shown once" in out.stderr


# -- credentials -----------------------------------------------------------------------------------
def test_approvers_list_shows_who_and_never_a_secret(cli: Cli) -> None:
    token = cli.token("reviewer-5")
    cli.token("boss", "globex")
    listed = cli.ok("approvers", "list", "--json")
    assert [(r["name"], r["tenants"], r["revoked_at"]) for r in listed] == [
        ("reviewer-5", ["acme"], None),
        ("boss", ["globex"], None),
    ]
    text = cli("approvers", "list")
    for out in (json.dumps(listed), text.stdout):
        assert token not in out and token.split("_")[-1] not in out and "sha256" not in out
    assert "reviewer-5" in text.stdout and "active" in text.stdout


def test_a_revoked_credential_no_longer_approves(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    token = cli.token("reviewer-5")
    out = cli("approvers", "revoke", "reviewer-5")
    assert out.returncode == 0 and "revoked approver reviewer-5" in out.stdout
    refused = cli("approvals", "approve", approval_id, TETHER_APPROVER_TOKEN=token)
    assert_one_line_error(refused, "not accepted")
    assert refused.returncode == 2
    again = cli("approvers", "revoke", "reviewer-5")
    assert_one_line_error(again, "no active approver")


def test_a_made_up_credential_is_refused_without_naming_anyone(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    cli.token("reviewer-5")
    for bad in ("not-a-token", "tth_cred-0123456789abcdef_" + "A" * 43):
        out = cli("approvals", "approve", approval_id, TETHER_APPROVER_TOKEN=bad)
        assert_one_line_error(out, "not accepted")
        assert out.returncode == 2
        assert "reviewer-5" not in out.stderr
    assert cli.ok("approvals", "list", "--status", "pending", "--json")[0]["status"] == "pending"


def test_no_credential_says_how_to_get_one(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    out = cli("approvals", "approve", approval_id, "--approver", "reviewer-5")
    assert_one_line_error(out, "tether approvers add NAME --tenant T", "TETHER_APPROVER_TOKEN")
    assert out.returncode == 2


def test_approver_is_only_an_assertion_checked_against_the_credential(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    out = cli.as_approver("reviewer-5", "approvals", "approve", approval_id, "--approver", "boss")
    assert_one_line_error(out, "--approver boss does not name the holder")
    decided = cli.ok_as(
        "reviewer-5", "approvals", "approve", approval_id, "--approver", "reviewer-5", "--json"
    )
    assert decided["approver"] == "reviewer-5"


def test_an_approver_of_another_tenant_cannot_decide(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    out = cli.as_approver("reviewer-5", "approvals", "approve", approval_id, tenant="globex")
    assert_one_line_error(out, "not valid for tenant acme")


def test_a_token_file_must_be_private(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    path = cli.tmp / "reviewer.token"
    path.write_text(cli.token("reviewer-5") + "\n")
    path.chmod(0o644)
    out = cli("approvals", "approve", approval_id, "--token-file", str(path))
    assert_one_line_error(out, f"chmod 600 {path}")
    path.chmod(0o600)
    decided = cli.ok("approvals", "approve", approval_id, "--token-file", str(path), "--json")
    assert decided["status"] == "approved"


def test_a_decision_is_audited_with_its_credential_and_no_secret(cli: Cli) -> None:
    _, approval_id = cli.waiting()
    token = cli.token("reviewer-5")
    decided = cli.ok_as("reviewer-5", "approvals", "approve", approval_id, "--json")
    with sqlite3.connect(cli.tmp / "t.db") as c:
        bodies = [r[0] for r in c.execute("SELECT body FROM audit_log")]
    [granted] = [json.loads(b) for b in bodies if '"approval_granted"' in b]
    assert granted["data"]["approver_credential"] == decided["approver_credential"]
    secret = token.split("_", 2)[2]  # tth_<credential id>_<secret>; the secret may hold "_"
    assert len(secret) >= 40 and all(secret not in b for b in bodies)


def test_a_grant_written_with_sql_is_not_honoured(cli: Cli) -> None:
    run_id, approval_id = cli.waiting()
    cli.token("reviewer-5")  # named before the edit: a store that fails verify makes no admin
    with sqlite3.connect(cli.tmp / "t.db") as c:
        (body,) = c.execute(
            "SELECT record_json FROM approvals WHERE approval_id = ?", (approval_id,)
        ).fetchone()
        forged = {**json.loads(body), "status": "approved", "approver": "reviewer-5"}
        forged.update(decision="approve", decided_at=forged["created_at"] + 1)
        c.execute(
            "UPDATE approvals SET status = 'approved', record_json = ? WHERE approval_id = ?",
            (json.dumps(forged), approval_id),
        )
    cli("runs", "resume", run_id)
    assert cli.witness("close_ticket") == []
    # The same approval decided with a credential carries tether's seal, and runs.
    other_run, second = cli.waiting("close ticket T-2")
    cli.ok_as("reviewer-5", "approvals", "approve", second, "--json")
    assert cli.ok("runs", "resume", other_run, "--json")["status"] == "completed"
    assert cli.witness("close_ticket") == [{"ticket_id": "T-2"}]


# -- principals ------------------------------------------------------------------------------------
def test_typed_principal_flags_are_refused_without_the_dev_flag(cli: Cli) -> None:
    out = cli("run", "--app", APP, "--principal", "root", "--tenant", "acme", "--scopes", "*", "hi")
    assert_one_line_error(out, "--dev-identity", "tether principals add")
    assert out.returncode == 2
    assert not (cli.tmp / "t.db").exists()  # refused before anything was opened


def test_the_dev_identity_flag_warns_and_is_recorded(cli: Cli) -> None:
    out = cli(
        "run",
        "--app",
        APP,
        "--dev-identity",
        "--principal",
        "dev-1",
        "--json",
        "what about ticket T-3?",
    )
    assert out.returncode == 0, out.stderr
    assert "--dev-identity" in out.stderr and "warning" in out.stderr
    run_id = json.loads(lines(out)[-1])["run_id"]
    assert checkpoint(cli, run_id)["dev_identity"] is True
    [listed] = cli.ok("runs", "list", "--json")
    assert listed["principal_id"] == "dev-1"


def test_a_principal_credential_decides_who_the_run_acts_for(cli: Cli) -> None:
    out = cli("principals", "add", "alice", "--tenant", "acme", "--scopes", "ticket:read")
    assert out.returncode == 0, out.stderr
    token = lines(out)[-1]
    started = cli.ok(
        "run", "--app", APP, "--json", "close ticket T-4", TETHER_PRINCIPAL_TOKEN=token
    )
    [listed] = cli.ok("runs", "list", "--json")
    assert (listed["principal_id"], listed["tenant_id"]) == ("alice", "acme")
    # alice may read, not write: the close is denied by scope, not sent for approval.
    assert started["status"] == "completed" and "missing scope ticket:write" in started["final"]
    assert checkpoint(cli, started["run_id"])["principal_via"] == "token"
    both = cli(
        "run",
        "--app",
        APP,
        "--dev-identity",
        "--principal",
        "x",
        "hi",
        TETHER_PRINCIPAL_TOKEN=token,
    )
    assert_one_line_error(both, "contradict")
    wrong = cli("run", "--app", APP, "hi", TETHER_PRINCIPAL_TOKEN=cli.token("reviewer-5"))
    assert_one_line_error(wrong, "principal credential was not accepted")


def test_a_principal_needs_one_tenant(cli: Cli) -> None:
    out = cli("principals", "add", "bob", "--tenant", "", "--scopes", "a")
    assert out.returncode == 2 and "Traceback" not in out.stderr


# -- what approvals show ---------------------------------------------------------------------------
SECRET_APP = textwrap.dedent(
    """
    from tether import App, Policy, Principal, Registry, Risk
    from tether.models.scripted import ScriptedModel
    from tether.models import Message, ModelToolCall

    registry = Registry()
    NOTE = "sk-live0123456789abcdefXYZ"

    @registry.tool(risk=Risk.WRITE, sensitive_fields=frozenset({"pin"}))
    def pay(account_id: str, pin: str, note: str) -> str:
        '''Pay from an account.'''
        return "paid"

    def app() -> App:
        call = ModelToolCall(
            id="pay-1",
            name="pay",
            arguments={"account_id": "A-1", "pin": "4242-9876", "note": NOTE},
        )
        return App(
            registry=registry,
            policy=Policy(version="p1", approvers=frozenset({"reviewer-5"})),
            model=lambda: ScriptedModel([Message(role="assistant", tool_calls=(call,))]),
            principal=Principal(subject="user-42", tenant="acme"),
        )
    """
)


def secret_approval(cli: Cli) -> str:
    (cli.tmp / "payapp.py").write_text(SECRET_APP)
    started = cli.ok("run", "--app", "payapp:app", "--json", "pay")
    assert started["status"] == "awaiting_approval", started
    [approval_id] = started["approvals"]
    return str(approval_id)


def test_approvals_list_and_show_mask_secrets(cli: Cli) -> None:
    approval_id = secret_approval(cli)
    outputs = [
        cli("approvals", "list", "--json"),
        cli("approvals", "list"),
        cli("approvals", "show", approval_id, "--json"),
        cli("approvals", "show", approval_id),
    ]
    for out in outputs:
        assert out.returncode == 0, out.stderr
        assert "4242-9876" not in out.stdout and "sk-live0123456789abcdefXYZ" not in out.stdout
        assert "A-1" in out.stdout
    shown = json.loads(outputs[2].stdout)
    assert shown["redacted"] == ["note", "pin"]
    assert shown["resource"] == "account:A-1"


def test_reveal_needs_a_credential_for_the_tenant_and_is_audited(cli: Cli) -> None:
    approval_id = secret_approval(cli)
    out = cli("approvals", "show", approval_id, "--reveal")
    assert_one_line_error(out, "approver credential")
    out = cli.as_approver("reviewer-5", "approvals", "show", approval_id, "--reveal", tenant="x")
    assert_one_line_error(out, "not valid for tenant acme")
    # An approver of the tenant whom the request does not name sees nothing in clear.
    out = cli.as_approver("auditor-2", "approvals", "show", approval_id, "--reveal")
    assert_one_line_error(out, "is not an approver of approval")
    assert "4242-9876" not in out.stdout
    shown = cli.ok_as("reviewer-5", "approvals", "show", approval_id, "--reveal", "--json")
    assert shown["arguments"]["pin"] == "4242-9876"
    with sqlite3.connect(cli.tmp / "t.db") as c:
        bodies = [json.loads(r[0]) for r in c.execute("SELECT body FROM audit_log")]
    [revealed] = [b for b in bodies if b["kind"] == "approval_revealed"]
    assert revealed["actor"] == "reviewer-5"
    assert revealed["data"]["fields"] == ["note", "pin"]
    assert "4242-9876" not in json.dumps(bodies)


def test_effects_list_never_prints_a_secret_from_an_error(cli: Cli) -> None:
    (cli.tmp / "failapp.py").write_text(
        textwrap.dedent(
            """
            from tether import App, Policy, Principal, Registry, Risk
            from tether.models.scripted import ScriptedModel
            from tether.models import Message, ModelToolCall

            registry = Registry()

            @registry.tool(risk=Risk.READ)
            def fetch(url: str) -> str:
                '''Fetch a page.'''
                raise RuntimeError("upstream refused key sk-live0123456789abcdefXYZ")

            def app() -> App:
                call = ModelToolCall(id="f-1", name="fetch", arguments={"url": "https://x"})
                return App(
                    registry=registry,
                    policy=Policy(version="p1"),
                    model=lambda: ScriptedModel(
                        [Message(role="assistant", tool_calls=(call,)),
                         Message(role="assistant", content="done")]
                    ),
                    principal=Principal(subject="user-42", tenant="acme"),
                )
            """
        )
    )
    cli.ok("run", "--app", "failapp:app", "--json", "go")
    for out in (cli("effects", "list", "--json"), cli("effects", "list")):
        assert out.returncode == 0, out.stderr
        assert "sk-live0123456789abcdefXYZ" not in out.stdout
        assert "[REDACTED]" in out.stdout


# -- contradictory and malformed input -------------------------------------------------------------
def unknown_effect(cli: Cli) -> str:
    """A close_ticket left in flight by a crash right after its dispatch was recorded."""
    out = cli("run", "--app", APP, "--json", "close ticket T-8")
    [approval_id] = json.loads(lines(out)[-1])["approvals"]
    cli.ok_as("reviewer-5", "approvals", "approve", approval_id, "--json")
    run_id = json.loads(lines(out)[-1])["run_id"]
    cli("runs", "resume", run_id, TETHER_CRASH_AT="gate.after_dispatch_commit")
    [key] = [
        e["operation_key"]
        for e in cli.ok("effects", "list", "--json")
        if e["status"] == "dispatched"
    ]
    return str(key)


def test_effects_resolve_refuses_contradictions_and_bad_json(cli: Cli) -> None:
    key = unknown_effect(cli)
    for args, needle in [
        (("--committed", "--absent"), "contradict"),
        ((), "--committed or --absent"),
        (("--committed", "--result", "{oops"), "not valid JSON"),
        (("--absent", "--result", "{}"), "--result"),
    ]:
        out = cli.as_approver("reviewer-5", "effects", "resolve", key, *args)
        assert out.returncode == 2, out.stderr
        assert needle in out.stderr and "Traceback" not in out.stderr
    # Saying whether it happened decides whether it is sent again: a typed name is not enough.
    anonymous = cli("effects", "resolve", key, "--committed")
    assert_one_line_error(anonymous, "TETHER_APPROVER_TOKEN")
    elsewhere = cli.as_approver(
        "reviewer-5", "effects", "resolve", key, "--absent", tenant="globex"
    )
    assert_one_line_error(elsewhere, "acme")
    # An approver of the tenant the policy does not name for the tool, and the requester's
    # own approver credential, cannot say it did not happen (and so have it sent again).
    outsider = cli.as_approver("auditor-2", "effects", "resolve", key, "--absent")
    assert_one_line_error(outsider, "may not resolve", "reviewer-5")
    [run] = cli.ok("runs", "list", "--json")
    requester = cli.as_approver(run["principal_id"], "effects", "resolve", key, "--absent")
    assert_one_line_error(requester, "may not resolve")
    [effect] = [e for e in cli.ok("effects", "list", "--json") if e["operation_key"] == key]
    assert effect["status"] == "dispatched"  # nothing was settled by a guess
    done = cli.ok(
        "effects",
        "resolve",
        key,
        "--committed",
        "--result",
        '{"ok": true}',
        "--json",
        TETHER_APPROVER_TOKEN=cli.token(),
    )
    assert done["status"] == "reconciled_committed"


@pytest.mark.parametrize(
    "option",
    [("--concurrency", "0"), ("--lease", "0"), ("--poll", "-1"), ("--exit-when-idle", "-1")],
)
def test_worker_options_must_be_positive(cli: Cli, option: tuple[str, str]) -> None:
    # Should the check be missing, the worker exits at once when idle (the last option wins).
    out = cli("worker", "--app", APP, "--exit-when-idle", "0", *option)
    assert out.returncode == 2
    assert option[0] in out.stderr


def test_runs_show_of_an_unknown_run_is_one_sentence(cli: Cli) -> None:
    cli.token()  # the store exists
    out = cli("runs", "show", "run-nope", "--json")
    assert_one_line_error(out, "no run run-nope")
    assert out.returncode == 2
    out = cli("runs", "rollback", "run-nope", "--app", APP)
    assert_one_line_error(out, "no run run-nope")


def test_approvals_show_of_an_unknown_approval_is_one_sentence(cli: Cli) -> None:
    cli.token()
    out = cli("approvals", "show", "apr-nope")
    assert_one_line_error(out, "no approval apr-nope")
    assert out.returncode == 2


# -- finding the app -------------------------------------------------------------------------------
def test_app_is_found_in_the_working_directory(cli: Cli) -> None:
    (cli.tmp / "myagent.py").write_text("from tether.demo import support as app\n")
    env = {k: v for k, v in cli.env.items() if k != "PYTHONPATH"}
    script = Path(sys.executable).with_name("tether")  # the console script, not python -m
    out = subprocess.run(
        [str(script), "run", "--app", "myagent:app", "--json", "close ticket T-9"],
        cwd=cli.tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(lines(out)[-1])["status"] == "awaiting_approval"


@pytest.mark.parametrize(
    ("source", "reference", "needle"),
    [
        (None, "json:dumps", "needs arguments"),
        (None, "json:JSONDecodeError", "needs arguments"),
        (
            "def app():\n    raise RuntimeError('no model key')\n",
            "broken:app",
            "raised RuntimeError",
        ),
        ("raise ImportError('missing extra')\n", "broken:app", "importing 'broken'"),
        ("x = 1 +\n", "broken:app", "importing 'broken'"),
        ("app = 42\n", "broken:app", "gave a int"),
        (None, "nosuchmodule:app", "importing 'nosuchmodule'"),
        (None, "tether.demo:nothing", "no attribute 'nothing'"),
        (None, "no-colon", "module:attribute"),
    ],
)
def test_a_bad_app_is_one_sentence(
    cli: Cli, source: str | None, reference: str, needle: str
) -> None:
    if source is not None:
        (cli.tmp / "broken.py").write_text(source)
    out = cli("run", "--app", reference, "hi")
    assert_one_line_error(out, needle)
    assert out.returncode == 2
    assert "a tether App, or a function of no arguments returning one" in out.stderr or (
        "importing" in needle
    )


def test_exit_codes_are_documented() -> None:
    import tether.cli

    doc = tether.cli.__doc__ or ""
    for code in ("0    done", "1    the answer is no", "2    could not do what was asked"):
        assert code in doc


def test_naming_an_approver_or_a_principal_is_an_administrators_decision(cli: Cli) -> None:
    # Without an admin credential (the requester's own shell, an approver's credential),
    # nobody can be named; the first administrator is made once, on a store with none.
    out = cli.raw("approvers", "add", "boss", "--tenant", "acme")
    assert_one_line_error(out, "no tether store")  # a refused naming creates nothing
    assert not (cli.tmp / "t.db").exists()
    cli("migrate")
    out = cli.raw("approvers", "add", "boss", "--tenant", "acme")
    assert_one_line_error(out, "no administrator yet", "tether admins add NAME")
    admin = cli.admin()
    assert_one_line_error(cli.raw("admins", "add", "intruder"), "admin credential")
    approver = cli.token()  # named by the administrator
    for token in (approver, "tth_not-a-credential"):
        out = cli.raw("approvers", "add", "boss", "--tenant", "acme", TETHER_ADMIN_TOKEN=token)
        assert_one_line_error(out, "not accepted")
        out = cli.raw(
            "principals", "add", "mallory", "--tenant", "acme", "--scopes", "*",
            TETHER_ADMIN_TOKEN=token,
        )  # fmt: skip
        assert_one_line_error(out, "not accepted")
    names = [a["name"] for a in cli.ok("approvers", "list", "--json")]
    assert names == ["reviewer-5"]
    # An administrator names, and is the actor the log records.
    second = cli.raw("admins", "add", "second-admin", TETHER_ADMIN_TOKEN=admin)
    assert second.returncode == 0, second.stderr
    with sqlite3.connect(cli.tmp / "t.db") as c:
        bodies = [json.loads(r[0]) for r in c.execute("SELECT body FROM audit_log")]
    added = [b for b in bodies if b["kind"] == "credential_added"]
    assert [b["actor"] for b in added][-2:] == ["test-admin", "test-admin"]


def test_lost_administrators_come_back_only_through_the_key_holder(cli: Cli) -> None:
    """Deleting every admin row with SQL does not make the store "one with none": its log
    no longer verifies, so `admins add` refuses, and only whoever holds the audit keyring
    can name a new administrator (`admins recover --keyring`), audited as theirs."""
    cli.admin()
    with sqlite3.connect(cli.tmp / "t.db") as c:
        c.execute("DELETE FROM credentials WHERE kind = 'admin'")
    assert_one_line_error(cli.raw("admins", "add", "intruder"), "does not verify", "recover")
    stranger = cli.tmp / "other.key"
    made = cli.raw("migrate", "--db", f"sqlite:///{cli.tmp}/other.db")
    assert made.returncode == 0, made.stderr
    (cli.tmp / "other.db.key").rename(stranger)
    out = cli.raw("admins", "recover", "new-admin", "--keyring", str(stranger))
    assert_one_line_error(out, "does not hold this store's audit key")
    out = cli.raw("admins", "recover", "new-admin", "--keyring", str(cli.tmp / "t.db.key"))
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    named = cli.raw("approvers", "add", "boss", "--tenant", "acme", TETHER_ADMIN_TOKEN=token)
    assert named.returncode == 0, named.stderr
    with sqlite3.connect(cli.tmp / "t.db") as c:
        bodies = [json.loads(r[0]) for r in c.execute("SELECT body FROM audit_log")]
    added = [b for b in bodies if b["kind"] == "credential_added"]
    assert [(b["actor"], b["data"]["name"]) for b in added][-2:] == [
        ("audit key holder", "new-admin"),
        ("new-admin", "boss"),
    ]


def test_credentials_from_before_seals_work_again_only_once_the_key_holder_says(cli: Cli) -> None:
    token = cli.token()
    with sqlite3.connect(cli.tmp / "t.db") as c:  # as a tether before sealed credentials left it
        c.execute("UPDATE credentials SET seal = NULL")
    listed = cli.raw("approvers", "list", "--json")
    assert json.loads(listed.stdout.splitlines()[-1])[0]["sealed"] is False
    out = cli.raw("approvals", "approve", "apr-none", TETHER_APPROVER_TOKEN=token)
    assert_one_line_error(out, "not as tether wrote it", "migrate --seal-credentials")
    sealed = cli.raw("migrate", "--seal-credentials")
    assert sealed.returncode == 0, sealed.stderr
    assert "sealed approver reviewer-5" in sealed.stdout
    out = cli.raw("approvals", "approve", "apr-none", TETHER_APPROVER_TOKEN=token)
    assert "not as tether wrote it" not in out.stderr and "no approval apr-none" in out.stderr
