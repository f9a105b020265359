"""The ``tether`` command.

Every command that reads state takes ``--db URL`` (or ``$TETHER_DB``). Commands that only read,
or that act on what a store already holds (deciding approvals, resuming, resolving,
recovering, rolling back), never create one: a typo in a URL is an error, not a new empty
database. ``run``, ``worker``, ``demo``, ``migrate`` and the ``add`` commands create it.

Who acts is authenticated, never typed (invariant I9): approvers present the credential that
``tether approvers add`` made (``$TETHER_APPROVER_TOKEN`` or ``--token-file``), and a run acts
for the app's principal or for a principal credential (``$TETHER_PRINCIPAL_TOKEN``).

Errors go to stderr as one sentence. Exit codes:

    0    done
    1    the answer is no (``tether audit verify``: the log does not verify)
    2    could not do what was asked: bad or contradictory input, a missing store, an unknown
         run, approval or effect, a refused credential, a refused decision
    130  interrupted
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tether.app import App, load_app
from tether.approvals import Approval, ApprovalStatus, mask_value
from tether.cli_audit import audit
from tether.cli_common import DB_OPTION, JSON_OPTION, open_cli_store
from tether.crash import ENV as CRASH_ENV
from tether.crash import POINTS
from tether.crash import validate as validate_crash_point
from tether.decisions import decide_approval, edit_approval
from tether.errors import (
    ApprovalStateError,
    ApproverNotAuthorized,
    ConfigurationError,
    CredentialRefused,
    IdentityError,
    RunStateError,
    TetherError,
)
from tether.identity import (
    TOKEN_ENV,
    Identity,
    Kind,
    Registered,
    add_identity,
    authenticate,
    check_registration,
    list_identities,
    read_token,
    require_token,
    revoke_identity,
)
from tether.policy import Principal
from tether.reconcile import resolve_effect
from tether.recovery import recover, rollback
from tether.runs import RunResult, load_result
from tether.store import Store
from tether.worker import Worker

F = TypeVar("F", bound=Callable[..., Any])


def _open(db: str, *, create: bool, read_only: bool = False) -> Store:
    return open_cli_store(db, create=create, read_only=read_only)


def _look(db: str) -> Store:
    """A store opened only to read: never created, never migrated, never written."""
    return _open(db, create=False, read_only=True)


def _json_input(value: str, option: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(
            f"is not valid JSON ({e.msg} at character {e.pos}); quote it, e.g. '{{\"k\": 1}}'",
            param_hint=option,
        ) from None


def _operator() -> str:
    """Who ran an administrative command, as the operating system knows them."""
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a bare container): say so rather than guess
        return "local:unknown"


@click.group()
@click.version_option(package_name="tether")
def main() -> None:
    """tether: one governed, durable gate between an AI agent and its tools."""


main.add_command(audit)


@main.command()
@DB_OPTION
def demo(db: str) -> None:
    """Run the three seed scenarios and print their numbers (JSON on the last line)."""
    from tether.demo.seeds import run_all

    with _open(db, create=True) as store:
        click.echo(f"tether demo on {store.url}")
        summary = run_all(store, click.echo)
    click.echo(json.dumps(summary, ensure_ascii=False, default=str))


@main.command()
@DB_OPTION
def migrate(db: str) -> None:
    """Create or upgrade the store's tables."""
    with _open(db, create=True) as store:
        version = getattr(store, "schema_version", None)
        click.echo(f"{store.url}: schema version {version}")


# -- identities ----------------------------------------------------------------------------------
TOKEN_FILE_HELP = "Read the {kind} credential from this file (mode 600) instead of ${env}."


def token_file_option(kind: Kind) -> Callable[[F], F]:
    return click.option(
        "--token-file",
        type=click.Path(dir_okay=False),
        default=None,
        help=TOKEN_FILE_HELP.format(kind=kind, env=TOKEN_ENV[kind]),
    )


def approver_options(f: F) -> F:
    """The credential that says who is deciding, and the optional name to check it against."""
    f = token_file_option("approver")(f)
    return click.option(
        "--approver",
        "asserted",
        default=None,
        help="Your approver name: checked against your credential, never instead of it.",
    )(f)


def _approver(store: Store, token: str, asserted: str | None) -> Identity:
    who = authenticate(store, token, "approver")
    if asserted is not None and asserted != who.name:
        raise CredentialRefused(
            f"--approver {asserted} does not name the holder of this credential; drop "
            f"--approver, or present {asserted}'s own credential",
            reasons=("approver name does not match the credential",),
        )
    return who


def _print_credential(identity: Identity, token: str) -> None:
    """The notes go to stderr and the credential alone to stdout, so that
    ``TOKEN=$(tether approvers add …)`` captures exactly the credential."""
    where = "any tenant" if identity.any_tenant else "tenant " + ", ".join(sorted(identity.tenants))
    click.echo(f"{identity.kind} {identity.name} ({identity.credential_id}) for {where}.", err=True)
    click.echo(
        f"This credential is shown once; give it to {identity.name} to use as "
        f"{TOKEN_ENV[identity.kind]} or with --token-file:",
        err=True,
    )
    click.echo(token)


def _list(db: str, kind: Kind, as_json: bool) -> None:
    with _look(db) as store:
        found = list_identities(store, kind)
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in found]))
        return
    if not found:
        click.echo(f"no {kind}s registered; add one with `tether {kind}s add NAME --tenant T`")
    for r in found:
        click.echo(_registered_line(r))


def _registered_line(r: Registered) -> str:
    i = r.identity
    tenants = "*" if i.any_tenant else ",".join(sorted(i.tenants))
    scopes = f" scopes={','.join(sorted(i.scopes))}" if i.kind == "principal" else ""
    state = "active" if r.revoked_at is None else f"revoked {_when(r.revoked_at)}"
    return f"{i.credential_id}  {i.name:<20} tenants={tenants}{scopes}  {state}"


def _revoke(db: str, kind: Kind, name_or_id: str) -> None:
    with _open(db, create=False) as store:
        revoked = revoke_identity(store, name_or_id, kind, now=time.time(), actor=_operator())
    for identity in revoked:
        click.echo(f"revoked {kind} {identity.name} ({identity.credential_id})")


@main.group()
def approvers() -> None:
    """Register, list and revoke approvers: who may decide approvals, by credential."""


@approvers.command("add")
@DB_OPTION
@click.argument("name")
@click.option("--tenant", "tenants", multiple=True, help="A tenant they approve for (repeat).")
@click.option("--any-tenant", is_flag=True, help="They may approve for every tenant.")
def approvers_add(db: str, name: str, tenants: tuple[str, ...], any_tenant: bool) -> None:
    """Register approver NAME; prints their new credential (once) on the last line."""
    check_registration(name, "approver", frozenset(tenants), any_tenant, frozenset())
    with _open(db, create=True) as store:
        identity, token = add_identity(
            store,
            name,
            "approver",
            now=time.time(),
            tenants=tenants,
            any_tenant=any_tenant,
            actor=_operator(),
        )
    _print_credential(identity, token)


@approvers.command("list")
@DB_OPTION
@JSON_OPTION
def approvers_list(db: str, as_json: bool) -> None:
    """List approvers' credentials (never their secrets), revoked ones marked."""
    _list(db, "approver", as_json)


@approvers.command("revoke")
@DB_OPTION
@click.argument("name_or_credential_id")
def approvers_revoke(db: str, name_or_credential_id: str) -> None:
    """Revoke one credential by its id, or every credential of an approver by name."""
    _revoke(db, "approver", name_or_credential_id)


@main.group()
def principals() -> None:
    """Register, list and revoke principals: who a run may act for, by credential."""


@principals.command("add")
@DB_OPTION
@click.argument("name")
@click.option("--tenant", required=True, help="The tenant the principal acts in.")
@click.option("--scopes", required=True, help="Comma-separated scopes ('' for none).")
def principals_add(db: str, name: str, tenant: str, scopes: str) -> None:
    """Register principal NAME; prints their new credential (once) on the last line."""
    scope_set = _scopes(scopes)
    check_registration(name, "principal", frozenset({tenant}), False, scope_set)
    with _open(db, create=True) as store:
        identity, token = add_identity(
            store,
            name,
            "principal",
            now=time.time(),
            tenants=(tenant,),
            scopes=scope_set,
            actor=_operator(),
        )
    _print_credential(identity, token)


@principals.command("list")
@DB_OPTION
@JSON_OPTION
def principals_list(db: str, as_json: bool) -> None:
    """List principals' credentials (never their secrets), revoked ones marked."""
    _list(db, "principal", as_json)


@principals.command("revoke")
@DB_OPTION
@click.argument("name_or_credential_id")
def principals_revoke(db: str, name_or_credential_id: str) -> None:
    """Revoke one credential by its id, or every credential of a principal by name."""
    _revoke(db, "principal", name_or_credential_id)


def _scopes(text: str) -> frozenset[str]:
    return frozenset(s.strip() for s in text.split(",") if s.strip())


# -- effects -------------------------------------------------------------------------------------
@main.group()
def effects() -> None:
    """Inspect the effect ledger."""


@effects.command("list")
@DB_OPTION
@JSON_OPTION
@click.option("--run", "run_id", default=None, help="Only this run's effects.")
def effects_list(db: str, as_json: bool, run_id: str | None) -> None:
    """List recorded effects, oldest first."""
    with _look(db) as store:
        rows = [_effect_row(e.to_dict()) for e in store.list_effects(run_id)]
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no effects recorded")
    for r in rows:
        ref = f" ref={r['external_reference']}" if r["external_reference"] else ""
        error = f" error={r['error']}" if r.get("error") else ""
        click.echo(f"{r['status']:<21} {r['operation_key']}{ref}{error}")


def _effect_row(row: dict[str, Any]) -> dict[str, Any]:
    # The result is the tool's business; an error's text may quote a secret it was given.
    row.pop("result_json", None)
    masked, _ = mask_value(row)
    return dict(masked)


@effects.command("resolve")
@DB_OPTION
@JSON_OPTION
@click.argument("operation_key")
@click.option("--committed", is_flag=True, help="It happened.")
@click.option("--absent", is_flag=True, help="It did not happen.")
@click.option("--result", "result_json", default=None, help="What it returned, as JSON.")
@approver_options
def effects_resolve(
    db: str,
    as_json: bool,
    operation_key: str,
    committed: bool,
    absent: bool,
    result_json: str | None,
    token_file: str | None,
    asserted: str | None,
) -> None:
    """Say what happened to an effect whose outcome is unknown; then run `tether recover`.

    Whoever says so decides whether a side effect is sent again, so it takes an approver's
    credential (allowed for the run's tenant), like deciding an approval."""
    _check_outcome(committed, absent, result_json)
    result = _json_input(result_json, "--result") if result_json is not None else None
    token = require_token("approver", token_file, "resolving an effect")
    with _open(db, create=False) as store:
        who = _approver(store, token, asserted)
        _check_resolver(store, operation_key, who)
        settled = resolve_effect(
            store,
            operation_key,
            committed=committed,
            result=result,
            actor=who.name,
            now=time.time(),
        )
    if as_json:
        click.echo(json.dumps(_effect_row(settled.to_dict())))
    else:
        click.echo(f"{operation_key}: {settled.status.value}; continue with `tether recover`")


def _check_resolver(store: Store, operation_key: str, who: Identity) -> None:
    with store.read() as tx:
        effect = tx.get_effect(operation_key)
        run = tx.get_run(effect.run_id) if effect is not None else None
    if run is not None and not who.allows_tenant(run.tenant_id):
        raise CredentialRefused(
            f"{who.name} may not resolve effects of tenant {run.tenant_id}'s runs",
            reasons=("tenant not allowed",),
        )


def _check_outcome(committed: bool, absent: bool, result_json: str | None) -> None:
    """One outcome, said explicitly: a guess here decides whether a side effect is retried."""
    if committed and absent:
        raise click.UsageError("--committed and --absent contradict each other; give one")
    if not committed and not absent:
        raise click.UsageError("say what happened: --committed or --absent")
    if absent and result_json is not None:
        raise click.UsageError("--result is what a committed effect returned; drop it or --absent")


# -- agent runs ----------------------------------------------------------------------------------
APP_OPTION = click.option(
    "--app",
    "app_ref",
    envvar="TETHER_APP",
    default=None,
    help="The agent app as module:attribute (default: the one the run was started with).",
)
DEV_IDENTITY_WARNING = (
    "warning: --dev-identity: this run acts for a principal nobody authenticated; "
    "for development only, and recorded in the run"
)


def _typed_principal(
    app: App, subject: str | None, tenant: str | None, scopes: str | None
) -> Principal:
    base = app.principal
    return Principal(
        subject=subject or base.subject,
        tenant=tenant or base.tenant,
        scopes=_scopes(scopes) if scopes is not None else base.scopes,
    )


def _check_principal_flags(typed_given: bool, token: str | None, dev_identity: bool) -> None:
    """Refuse, before anything is opened, a principal nobody authenticated."""
    if typed_given and token is not None:
        raise IdentityError(
            "a principal credential and --principal/--tenant/--scopes contradict each other; "
            "give one"
        )
    if typed_given and not dev_identity:
        raise IdentityError(
            "--principal, --tenant and --scopes name nobody authenticated; register a principal "
            "(tether principals add NAME --tenant T --scopes a,b) and set TETHER_PRINCIPAL_TOKEN, "
            "or add --dev-identity on a development machine"
        )


def _run_principal(
    store: Store,
    app: App,
    typed: tuple[str | None, str | None, str | None],
    token: str | None,
    dev_identity: bool,
) -> tuple[Principal, dict[str, Any]]:
    """Who the run acts for, and how that was established (kept in the run's metadata)."""
    if token is not None:
        who = authenticate(store, token, "principal")
        return who.principal(), {
            "principal_via": "token",
            "principal_credential": who.credential_id,
        }
    if dev_identity:
        click.echo(DEV_IDENTITY_WARNING, err=True)
        return _typed_principal(app, *typed), {"principal_via": "dev", "dev_identity": True}
    return app.principal, {"principal_via": "app"}


def _print_run(result: RunResult, as_json: bool) -> None:
    if not as_json:
        for step in result.steps:
            click.echo(f"[{step.index}] {step.kind:<17} {step.detail}")
        click.echo(f"run {result.run_id}: {result.status}")
        for approval_id in result.approvals:
            click.echo(
                f"  waiting for approval {approval_id}: "
                f"TETHER_APPROVER_TOKEN=… tether approvals approve {approval_id}"
            )
        if result.final:
            click.echo(f"final: {result.final}")
    click.echo(json.dumps(result.to_dict(), ensure_ascii=False))


def _app_for_run(store: Store, run_id: str, app_ref: str | None) -> tuple[App, str]:
    with store.read() as tx:
        record = tx.get_run(run_id)
    if record is None:
        raise RunStateError(f"no run {run_id}; see `tether runs list`")
    if app_ref is None:
        app_ref = json.loads(record.checkpoint_json).get("app")
        if not app_ref:
            raise ConfigurationError(f"run {run_id} was not started with --app; pass --app")
    return load_app(app_ref), app_ref


@main.command("run")
@DB_OPTION
@JSON_OPTION
@click.option("--app", "app_ref", envvar="TETHER_APP", required=True, help="module:attribute")
@token_file_option("principal")
@click.option("--principal", "subject", default=None, help="With --dev-identity: who it acts for.")
@click.option("--tenant", default=None, help="With --dev-identity: the principal's tenant.")
@click.option("--scopes", default=None, help="With --dev-identity: comma-separated scopes.")
@click.option(
    "--dev-identity",
    is_flag=True,
    help="DEVELOPMENT ONLY: act for the unauthenticated --principal/--tenant/--scopes.",
)
@click.option("--run-id", default=None, help="Choose the run id (default: a new one).")
@click.option("--enqueue", is_flag=True, help="Queue the run for a worker instead of running it.")
@click.argument("message")
def run_command(
    db: str,
    as_json: bool,
    app_ref: str,
    token_file: str | None,
    subject: str | None,
    tenant: str | None,
    scopes: str | None,
    dev_identity: bool,
    run_id: str | None,
    enqueue: bool,
    message: str,
) -> None:
    """Start a run of the app's agent on MESSAGE; it runs until done or waiting for a human.

    It acts for the app's principal, or for the principal whose credential is in
    $TETHER_PRINCIPAL_TOKEN (or --token-file)."""
    typed = (subject, tenant, scopes)
    token = read_token("principal", token_file)
    _check_principal_flags(any(v is not None for v in typed), token, dev_identity)
    app = load_app(app_ref)
    with _open(db, create=True) as store:
        principal, how = _run_principal(store, app, typed, token, dev_identity)
        runner = app.runner(store, metadata={"app": app_ref, **how})
        if enqueue:
            queued = runner.create_queued(message, principal, budget=app.budget, run_id=run_id)
            result = load_result(store, queued)
        else:
            result = runner.start(message, principal, budget=app.budget, run_id=run_id)
    _print_run(result, as_json)


POSITIVE = click.FloatRange(min=0, min_open=True)


@main.command("worker")
@DB_OPTION
@JSON_OPTION
@click.option("--app", "app_ref", envvar="TETHER_APP", required=True, help="module:attribute")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=1, show_default=True, help="Runs at once."
)
@click.option("--lease", "lease_s", type=POSITIVE, default=30.0, show_default=True, help="Seconds.")
@click.option(
    "--poll", "poll_s", type=POSITIVE, default=0.2, show_default=True, help="Idle poll, seconds."
)
@click.option(
    "--exit-when-idle",
    "idle_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Exit after this many seconds with nothing to do (default: run until SIGTERM).",
)
def worker_command(
    db: str,
    as_json: bool,
    app_ref: str,
    concurrency: int,
    lease_s: float,
    poll_s: float,
    idle_s: float | None,
) -> None:
    """Claim and drive runnable runs until SIGTERM; shares the work with other workers."""
    app = load_app(app_ref)
    with _open(db, create=True) as store:
        worker = Worker(
            app, store, app_ref=app_ref, concurrency=concurrency, lease_s=lease_s, poll_s=poll_s
        )
        worker.install_signal_handlers()
        stats = worker.run(exit_when_idle_s=idle_s)
    if not as_json:
        click.echo(f"worker {worker.name}: claimed {stats.claimed}, finished {stats.finished}")
    click.echo(json.dumps(stats.to_dict()))


@main.group()
def runs() -> None:
    """List, show and resume agent runs."""


@runs.command("list")
@DB_OPTION
@JSON_OPTION
@click.option("--status", default=None, help="Only runs in this status.")
def runs_list(db: str, as_json: bool, status: str | None) -> None:
    """List runs, oldest first."""
    with _look(db) as store:
        rows = [
            {k: v for k, v in r.to_dict().items() if k != "checkpoint_json"}
            for r in store.list_runs(status)
        ]
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no runs")
    for r in rows:
        click.echo(f"{r['run_id']:<28} {r['status']:<18} {r['principal_id']}@{r['tenant_id']}")


@runs.command("show")
@DB_OPTION
@JSON_OPTION
@click.argument("run_id")
def runs_show(db: str, as_json: bool, run_id: str) -> None:
    """Show a run: its status, steps and what it waits for."""
    with _look(db) as store:
        with store.read() as tx:
            record = tx.get_run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}; see `tether runs list`")
        result = load_result(store, run_id)
    data = {
        **result.to_dict(),
        "principal": record.principal_id,
        "tenant": record.tenant_id,
        "policy_version": record.policy_version,
        "state_version": record.state_version,
        "messages": len(result.messages),
    }
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return
    _print_run(result, as_json=False)


@runs.command("resume")
@DB_OPTION
@JSON_OPTION
@APP_OPTION
@click.argument("run_id")
def runs_resume(db: str, as_json: bool, app_ref: str | None, run_id: str) -> None:
    """Continue a run from where it stopped (after approvals were decided, or a crash)."""
    with _open(db, create=False) as store:
        app, ref = _app_for_run(store, run_id, app_ref)
        result = app.runner(store, metadata={"app": ref}).resume(run_id)
    _print_run(result, as_json)


# -- approvals -----------------------------------------------------------------------------------
@main.group()
def approvals() -> None:
    """List, show and decide approval requests (deciding needs an approver credential)."""


def _get_approval(store: Store, approval_id: str) -> Approval:
    with store.read() as tx:
        found = tx.get_approval(approval_id)
    if found is None:
        raise ApprovalStateError(f"no approval {approval_id}; see `tether approvals list`")
    return found


@approvals.command("list")
@DB_OPTION
@JSON_OPTION
@click.option(
    "--status",
    type=click.Choice([s.value for s in ApprovalStatus]),
    default=None,
    help="Only approvals in this status.",
)
@click.option("--run", "run_id", default=None, help="Only this run's approvals.")
def approvals_list(db: str, as_json: bool, status: str | None, run_id: str | None) -> None:
    """List approval requests, oldest first (sensitive arguments masked)."""
    with _look(db) as store:
        rows = store.list_approvals(ApprovalStatus(status) if status else None, run_id=run_id)
    if as_json:
        click.echo(json.dumps([a.public_dict() for a in rows], ensure_ascii=False))
        return
    if not rows:
        click.echo("no approvals")
    for a in rows:
        shown = a.public_dict()
        click.echo(
            f"{a.approval_id}  {a.status.value:<9} "
            f"{a.tool}({json.dumps(shown['arguments'], ensure_ascii=False)}) "
            f"run={a.run_id} requested by {a.actor}"
        )


@approvals.command("show")
@DB_OPTION
@JSON_OPTION
@click.argument("approval_id")
@click.option(
    "--reveal",
    is_flag=True,
    help="Show masked arguments in clear (needs an approver credential for its tenant; audited).",
)
@token_file_option("approver")
def approvals_show(
    db: str, as_json: bool, approval_id: str, reveal: bool, token_file: str | None
) -> None:
    """Show one approval request; sensitive arguments are masked unless --reveal."""
    token = require_token("approver", token_file, "--reveal") if reveal else None
    # Revealing writes its audit entry; only looking needs no write at all.
    with _open(db, create=False, read_only=not reveal) as store:
        approval = _get_approval(store, approval_id)
        if token is not None:
            _record_reveal(store, approval, authenticate(store, token, "approver"))
    data = approval.public_dict(reveal=reveal)
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return
    for line in _approval_lines(data):
        click.echo(line)


def _record_reveal(store: Store, approval: Approval, who: Identity) -> None:
    """Seeing the arguments in clear is itself a decision someone answers for."""
    if not who.allows_tenant(approval.tenant):
        raise ApproverNotAuthorized(
            f"{who.name}'s credential is not valid for tenant {approval.tenant}, so it cannot "
            f"reveal approval {approval.approval_id}; ask an approver of that tenant"
        )
    fields = approval.public_dict()["redacted"]
    with store.transaction() as tx:
        tx.append_audit(
            "approval_revealed",
            at=time.time(),
            run_id=approval.run_id,
            actor=who.name,
            data={
                "approval_id": approval.approval_id,
                "credential_id": who.credential_id,
                "fields": fields,
            },
        )


def _approval_lines(data: dict[str, Any]) -> list[str]:
    lines = [
        f"approval {data['approval_id']}: {data['status']}",
        f"  call       {data['tool']} v{data['tool_version']} on {data['resource']}",
        f"  arguments  {json.dumps(data['arguments'], ensure_ascii=False)}",
        f"  run        {data['run_id']}, requested by {data['actor']} in tenant {data['tenant']}",
        f"  policy     {data['policy_version']}; expires {_when(data['expires_at'])}",
    ]
    if data["redacted"]:
        lines.append(
            f"  masked     {', '.join(data['redacted'])} "
            f"(tether approvals show {data['approval_id']} --reveal)"
        )
    if data["decision"]:
        by = data["approver"] + (
            f" ({data['approver_credential']})" if data["approver_credential"] else ""
        )
        why = f": {data['reason']}" if data["reason"] else ""
        lines.append(f"  decided    {data['decision']} by {by} {_when(data['decided_at'])}{why}")
    return lines


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _decided(approval: Approval, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(approval.public_dict(), ensure_ascii=False))
    else:
        click.echo(
            f"{approval.approval_id}: {approval.status.value} by {approval.approver}; "
            f"resume with: tether runs resume {approval.run_id}"
        )


def _decide(
    db: str, approval_id: str, token_file: str | None, asserted: str | None, **how: Any
) -> Approval:
    token = require_token("approver", token_file, "deciding an approval")
    with _open(db, create=False) as store:
        who = _approver(store, token, asserted)
        return decide_approval(store, approval_id, who, now=time.time(), **how)


@approvals.command("approve")
@DB_OPTION
@JSON_OPTION
@click.argument("approval_id")
@approver_options
@click.option("--reason", default=None)
def approvals_approve(
    db: str,
    as_json: bool,
    approval_id: str,
    token_file: str | None,
    asserted: str | None,
    reason: str | None,
) -> None:
    """Approve a pending call, exactly as it was proposed."""
    decided = _decide(db, approval_id, token_file, asserted, approve=True, reason=reason)
    _decided(decided, as_json)


@approvals.command("deny")
@DB_OPTION
@JSON_OPTION
@click.argument("approval_id")
@approver_options
@click.option("--reason", required=True, help="Why; the agent's model is told.")
def approvals_deny(
    db: str,
    as_json: bool,
    approval_id: str,
    token_file: str | None,
    asserted: str | None,
    reason: str,
) -> None:
    """Deny a pending call; the model hears the reason when the run resumes."""
    decided = _decide(db, approval_id, token_file, asserted, approve=False, reason=reason)
    _decided(decided, as_json)


@approvals.command("edit")
@DB_OPTION
@JSON_OPTION
@APP_OPTION
@click.argument("approval_id")
@approver_options
@click.option("--arguments", "arguments_json", required=True, help="The new arguments as JSON.")
@click.option("--reason", default=None)
def approvals_edit(
    db: str,
    as_json: bool,
    app_ref: str | None,
    approval_id: str,
    token_file: str | None,
    asserted: str | None,
    arguments_json: str,
    reason: str | None,
) -> None:
    """Approve a pending call with other arguments: a new proposal, judged by the policy."""
    arguments = _json_input(arguments_json, "--arguments")
    if not isinstance(arguments, dict):
        raise click.BadParameter(
            "must be a JSON object, e.g. '{\"k\": 1}'", param_hint="--arguments"
        )
    token = require_token("approver", token_file, "editing an approval")
    with _open(db, create=False) as store:
        who = _approver(store, token, asserted)
        found = _get_approval(store, approval_id)
        app, _ = _app_for_run(store, found.run_id, app_ref)
        gate = app.gate(store)
        if gate.policy is None:
            raise ApprovalStateError("the app has no policy, so no one is authorised to edit")
        edited = edit_approval(
            store,
            gate.registry,
            gate.policy,
            approval_id,
            who,
            arguments,
            now=time.time(),
            reason=reason,
        )
    _decided(edited, as_json)


# -- recovery ------------------------------------------------------------------------------------
@main.command("recover")
@DB_OPTION
@JSON_OPTION
@click.option("--app", "app_ref", envvar="TETHER_APP", required=True, help="module:attribute")
def recover_command(db: str, as_json: bool, app_ref: str) -> None:
    """Resume runs whose worker died, reconciling what they left unsettled."""
    app = load_app(app_ref)
    with _open(db, create=False) as store:
        report = recover(store, lambda: app.runner(store, metadata={"app": app_ref}))
    data = report.to_dict()
    if not as_json:
        click.echo(
            f"recovered {data['runs_recovered']} run(s); effects reconciled: "
            + ", ".join(f"{k} {v}" for k, v in data["effects_reconciled"].items())
        )
        for run_id, status in report.recovered.items():
            click.echo(f"  {run_id}: {status}")
        for run_id in report.waiting_for_human:
            click.echo(
                f"  {run_id} waits for a human: tether effects list --run {run_id}, "
                "then tether effects resolve KEY --committed|--absent"
            )
    click.echo(json.dumps(data))


@runs.command("rollback")
@DB_OPTION
@JSON_OPTION
@APP_OPTION
@click.argument("run_id")
def runs_rollback(db: str, as_json: bool, app_ref: str | None, run_id: str) -> None:
    """Compensate the run's committed effects, newest first, each a governed call."""
    with _open(db, create=False) as store:
        app, _ = _app_for_run(store, run_id, app_ref)
        report = rollback(app.gate(store), run_id)
    data = report.to_dict()
    if not as_json:
        click.echo(f"run {run_id}: compensated {len(report.compensated)} effect(s)")
        for approval_id in report.waiting:
            click.echo(f"  an undo waits for approval {approval_id}; approve it, then run again")
        if report.stopped:
            click.echo(f"  stopped: {report.stopped}")
    click.echo(json.dumps(data))


@main.group()
def debug() -> None:
    """Tools for testing tether itself."""


@debug.command("crash-points")
def debug_crash_points() -> None:
    """List the named crash points (arm one with TETHER_CRASH_AT=name[:n])."""
    for name, what in POINTS.items():
        click.echo(f"{name:<30} {what}")


def run() -> None:
    """The console entry point: every failure ends as one sentence and an exit code."""
    armed = os.environ.get(CRASH_ENV)
    if armed:
        try:
            validate_crash_point(armed)
        except ValueError as e:
            click.echo(f"error: {CRASH_ENV}: {e}", err=True)
            sys.exit(2)
    try:
        code = main(standalone_mode=False)
    except click.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.UsageError as e:
        e.show()  # with the usage line: the command itself was wrong
        sys.exit(2)
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)  # a store that cannot be opened
        sys.exit(2)
    except TetherError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
