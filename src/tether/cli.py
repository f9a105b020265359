"""The ``tether`` command.

Every command that reads state takes ``--db URL`` (or ``$TETHER_DB``). Errors go to stderr as
one sentence with a non-zero exit code: 1 for "the answer is no" (an audit that does not
verify), 2 for "could not do what was asked".
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click

from tether.app import App, load_app
from tether.approvals import Approval, ApprovalStatus
from tether.cli_audit import audit
from tether.cli_common import DB_OPTION, JSON_OPTION, open_cli_store
from tether.crash import ENV as CRASH_ENV
from tether.crash import POINTS
from tether.crash import validate as validate_crash_point
from tether.decisions import decide_approval
from tether.errors import ApprovalStateError, ConfigurationError, RunStateError, TetherError
from tether.policy import Principal
from tether.reconcile import resolve_effect
from tether.recovery import recover, rollback
from tether.runs import RunResult, load_result
from tether.store import Store
from tether.worker import Worker


def _open(db: str) -> Store:
    return open_cli_store(db)


@click.group()
@click.version_option(package_name="tether")
def main() -> None:
    """tether: one governed, durable gate between an AI agent and its tools."""


main.add_command(audit)


@main.command()
@DB_OPTION
def demo(db: str) -> None:
    """Run the three seed scenarios and print their numbers (JSON on the last line)."""
    from tether.seeds import run_all

    with _open(db) as store:
        click.echo(f"tether demo on {store.url}")
        summary = run_all(store, click.echo)
    click.echo(json.dumps(summary, ensure_ascii=False, default=str))


@main.command()
@DB_OPTION
def migrate(db: str) -> None:
    """Create or upgrade the store's tables."""
    with _open(db) as store:
        version = getattr(store, "schema_version", None)
        click.echo(f"{store.url}: schema version {version}")


@main.group()
def effects() -> None:
    """Inspect the effect ledger."""


@effects.command("list")
@DB_OPTION
@JSON_OPTION
@click.option("--run", "run_id", default=None, help="Only this run's effects.")
def effects_list(db: str, as_json: bool, run_id: str | None) -> None:
    """List recorded effects, oldest first."""
    with _open(db) as store:
        rows = [e.to_dict() for e in store.list_effects(run_id)]
    for row in rows:
        row.pop("result_json", None)
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no effects recorded")
    for r in rows:
        ref = f" ref={r['external_reference']}" if r["external_reference"] else ""
        click.echo(f"{r['status']:<21} {r['operation_key']}{ref}")


# -- agent runs --------------------------------------------------------------------------------
APP_OPTION = click.option(
    "--app",
    "app_ref",
    envvar="TETHER_APP",
    default=None,
    help="The agent app as module:attribute (default: the one the run was started with).",
)


def _principal(app: App, subject: str | None, tenant: str | None, scopes: str | None) -> Principal:
    base = app.principal
    return Principal(
        subject=subject or base.subject,
        tenant=tenant or base.tenant,
        scopes=frozenset(s for s in scopes.split(",") if s) if scopes is not None else base.scopes,
    )


def _print_run(result: RunResult, as_json: bool) -> None:
    if not as_json:
        for step in result.steps:
            click.echo(f"[{step.index}] {step.kind:<17} {step.detail}")
        click.echo(f"run {result.run_id}: {result.status}")
        for approval_id in result.approvals:
            click.echo(
                f"  waiting for approval {approval_id}: "
                f"tether approvals approve {approval_id} --approver NAME"
            )
        if result.final:
            click.echo(f"final: {result.final}")
    click.echo(json.dumps(result.to_dict(), ensure_ascii=False))


def _app_for_run(store: Store, run_id: str, app_ref: str | None) -> tuple[App, str]:
    if app_ref is None:
        with store.read() as tx:
            record = tx.get_run(run_id)
        if record is None:
            raise RunStateError(f"no run {run_id}; see `tether runs list`")
        app_ref = json.loads(record.checkpoint_json).get("app")
        if not app_ref:
            raise ConfigurationError(f"run {run_id} was not started with --app; pass --app")
    return load_app(app_ref), app_ref


@main.command("run")
@DB_OPTION
@JSON_OPTION
@click.option("--app", "app_ref", envvar="TETHER_APP", required=True, help="module:attribute")
@click.option("--principal", "subject", default=None, help="Who the agent acts for.")
@click.option("--tenant", default=None, help="The principal's tenant.")
@click.option("--scopes", default=None, help="Comma-separated scopes of the principal.")
@click.option("--run-id", default=None, help="Choose the run id (default: a new one).")
@click.option("--enqueue", is_flag=True, help="Queue the run for a worker instead of running it.")
@click.argument("message")
def run_command(
    db: str,
    as_json: bool,
    app_ref: str,
    subject: str | None,
    tenant: str | None,
    scopes: str | None,
    run_id: str | None,
    enqueue: bool,
    message: str,
) -> None:
    """Start a run of the app's agent on MESSAGE; it runs until done or waiting for a human."""
    app = load_app(app_ref)
    with _open(db) as store:
        runner = app.runner(store, metadata={"app": app_ref})
        principal = _principal(app, subject, tenant, scopes)
        if enqueue:
            queued = runner.create_queued(message, principal, budget=app.budget, run_id=run_id)
            result = load_result(store, queued)
        else:
            result = runner.start(message, principal, budget=app.budget, run_id=run_id)
    _print_run(result, as_json)


@main.command("worker")
@DB_OPTION
@JSON_OPTION
@click.option("--app", "app_ref", envvar="TETHER_APP", required=True, help="module:attribute")
@click.option("--concurrency", default=1, show_default=True, help="Runs driven at once.")
@click.option("--lease", "lease_s", default=30.0, show_default=True, help="Lease in seconds.")
@click.option("--poll", "poll_s", default=0.2, show_default=True, help="Idle poll interval.")
@click.option(
    "--exit-when-idle",
    "idle_s",
    type=float,
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
    with _open(db) as store:
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
    with _open(db) as store:
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
    with _open(db) as store:
        result = load_result(store, run_id)
        with store.read() as tx:
            record = tx.get_run(run_id)
    assert record is not None
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
    with _open(db) as store:
        app, ref = _app_for_run(store, run_id, app_ref)
        result = app.runner(store, metadata={"app": ref}).resume(run_id)
    _print_run(result, as_json)


# -- approvals -------------------------------------------------------------------------------
@main.group()
def approvals() -> None:
    """List and decide approval requests."""


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
    """List approval requests, oldest first."""
    with _open(db) as store:
        rows = store.list_approvals(ApprovalStatus(status) if status else None, run_id=run_id)
    if as_json:
        click.echo(json.dumps([a.to_dict() for a in rows], ensure_ascii=False))
        return
    if not rows:
        click.echo("no approvals")
    for a in rows:
        click.echo(
            f"{a.approval_id}  {a.status.value:<9} {a.tool}({json.dumps(dict(a.arguments))}) "
            f"run={a.run_id} requested by {a.actor}"
        )


def _decided(approval: Approval, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(approval.to_dict(), ensure_ascii=False))
    else:
        click.echo(
            f"{approval.approval_id}: {approval.status.value} by {approval.approver}; "
            f"resume with: tether runs resume {approval.run_id}"
        )


@approvals.command("approve")
@DB_OPTION
@JSON_OPTION
@click.argument("approval_id")
@click.option("--approver", required=True, help="Who approves (must be authorised).")
@click.option("--reason", default=None)
def approvals_approve(
    db: str, as_json: bool, approval_id: str, approver: str, reason: str | None
) -> None:
    """Approve a pending call, exactly as it was proposed."""
    with _open(db) as store:
        decided = decide_approval(
            store, approval_id, approver, approve=True, now=time.time(), reason=reason
        )
    _decided(decided, as_json)


@approvals.command("deny")
@DB_OPTION
@JSON_OPTION
@click.argument("approval_id")
@click.option("--approver", required=True, help="Who denies (must be authorised).")
@click.option("--reason", required=True, help="Why; the agent's model is told.")
def approvals_deny(db: str, as_json: bool, approval_id: str, approver: str, reason: str) -> None:
    """Deny a pending call; the model hears the reason when the run resumes."""
    with _open(db) as store:
        decided = decide_approval(
            store, approval_id, approver, approve=False, now=time.time(), reason=reason
        )
    _decided(decided, as_json)


@approvals.command("edit")
@DB_OPTION
@JSON_OPTION
@APP_OPTION
@click.argument("approval_id")
@click.option("--approver", required=True, help="Who edits (must be authorised).")
@click.option("--arguments", "arguments_json", required=True, help="The new arguments as JSON.")
@click.option("--reason", default=None)
def approvals_edit(
    db: str,
    as_json: bool,
    app_ref: str | None,
    approval_id: str,
    approver: str,
    arguments_json: str,
    reason: str | None,
) -> None:
    """Approve a pending call with other arguments: a new proposal, judged by the policy."""
    try:
        arguments = json.loads(arguments_json)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not valid JSON: {e}", param_hint="--arguments") from e
    if not isinstance(arguments, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--arguments")
    with _open(db) as store:
        with store.read() as tx:
            found = tx.get_approval(approval_id)
        if found is None:
            raise ApprovalStateError(f"no approval {approval_id}; see `tether approvals list`")
        app, _ = _app_for_run(store, found.run_id, app_ref)
        edited = app.gate(store).edit(approval_id, approver, arguments, reason=reason)
    _decided(edited, as_json)


# -- recovery --------------------------------------------------------------------------------
@main.command("recover")
@DB_OPTION
@JSON_OPTION
@click.option("--app", "app_ref", envvar="TETHER_APP", required=True, help="module:attribute")
def recover_command(db: str, as_json: bool, app_ref: str) -> None:
    """Resume runs whose worker died, reconciling what they left unsettled."""
    app = load_app(app_ref)
    with _open(db) as store:
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


@effects.command("resolve")
@DB_OPTION
@JSON_OPTION
@click.argument("operation_key")
@click.option("--committed", "outcome", flag_value="committed", help="It happened.")
@click.option("--absent", "outcome", flag_value="absent", help="It did not happen.")
@click.option("--result", "result_json", default=None, help="What it returned, as JSON.")
@click.option("--by", "actor", envvar="USER", default="operator", help="Who says so.")
def effects_resolve(
    db: str,
    as_json: bool,
    operation_key: str,
    outcome: str | None,
    result_json: str | None,
    actor: str,
) -> None:
    """Say what happened to an effect whose outcome is unknown; then run `tether recover`."""
    if outcome is None:
        raise click.UsageError("say --committed or --absent")
    result = json.loads(result_json) if result_json else None
    with _open(db) as store:
        settled = resolve_effect(
            store,
            operation_key,
            committed=outcome == "committed",
            result=result,
            actor=actor,
            now=time.time(),
        )
    if as_json:
        click.echo(json.dumps(settled.to_dict()))
    else:
        click.echo(f"{operation_key}: {settled.status.value}; continue with `tether recover`")


@runs.command("rollback")
@DB_OPTION
@JSON_OPTION
@APP_OPTION
@click.argument("run_id")
def runs_rollback(db: str, as_json: bool, app_ref: str | None, run_id: str) -> None:
    """Compensate the run's committed effects, newest first, each a governed call."""
    with _open(db) as store:
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


def run() -> Any:
    armed = os.environ.get(CRASH_ENV)
    if armed:
        try:
            validate_crash_point(armed)
        except ValueError as e:
            click.echo(f"error: {CRASH_ENV}: {e}", err=True)
            sys.exit(2)
    try:
        return main(standalone_mode=True)
    except TetherError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
