"""Agent runs: ``tether run``, ``tether worker``, ``tether recover`` and ``tether runs``.

The module is long because it holds every ``tether runs`` subcommand; each is a thin click
wrapper, and they share their options and output.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import click

from tether.cli.common import DB_OPTION, JSON_OPTION
from tether.cli.output import Col, age, echo_json, note, table, when
from tether.cli.shared import (
    APP_OPTION,
    RUN_STATUSES,
    app_for_run,
    approver,
    approver_options,
    check_tenant,
    look,
    open_store,
    parse_scopes,
    token_file_option,
)

if TYPE_CHECKING:
    from tether.core.principal import Principal
    from tether.runs.app import App
    from tether.runs.runner import RunResult
    from tether.store import Store
    from tether.store.rows import RunRecord, StepRecord

DEV_IDENTITY_WARNING = (
    "warning: --dev-identity: this run acts for a principal nobody authenticated; "
    "for development only, and recorded in the run"
)
# A run in one of these needs someone (or something) else before it moves again.
STOPPED = (
    "awaiting_approval",
    "awaiting_reconciliation",
    "awaiting_model",
    "completed",
    "failed",
    "cancelled",
)
FOLLOW_POLL_S = 0.5
IN_FLIGHT_S = 300.0  # tether.runs.recovery.IN_FLIGHT_S, without importing it at start-up


# -- printing a run ------------------------------------------------------------------------------
def step_line(index: int, kind: str, detail: str) -> str:
    return f"[{index}] {kind:<17} {detail}"


def next_steps(run_id: str, status: str, approvals: list[str]) -> list[str]:
    """What to do about a run in ``status``: the commands, spelled out."""
    if status == "awaiting_approval":
        lines = []
        for a in approvals:
            lines += [
                f"  waiting for approval {a}: look at it with `tether approvals show {a}`,",
                f"    then TETHER_APPROVER_TOKEN=… tether approvals approve {a}"
                f"  (or deny {a} --reason WHY)",
            ]
        return [*lines, f"  then continue the run: tether runs resume {run_id}"]
    if status == "awaiting_reconciliation":
        return [
            "  an effect's outcome is unknown and nothing could settle it:",
            f"    tether effects list --run {run_id}, then tether effects resolve KEY "
            "--committed|--absent, then tether recover --app MODULE:ATTR",
        ]
    if status == "awaiting_model":
        return [
            "  the model could not be asked (see the run's last step); nothing is lost:",
            f"    tether runs resume {run_id} asks it again (a worker does, after a minute)",
        ]
    if status == "queued":
        return ["  queued: a worker picks it up (tether worker --app MODULE:ATTR)"]
    if status == "running":
        return [f"  running; follow it with: tether runs show {run_id} --follow"]
    return []


def print_run(result: RunResult) -> None:
    for step in result.steps:
        click.echo(step_line(step.index, step.kind, step.detail))
    print_outcome(result)


def print_outcome(result: RunResult) -> None:
    click.echo(f"run {result.run_id}: {result.status}")
    for key in result.waiting_on:
        click.echo(f"  waits on effect {key}")
    if result.final:
        click.echo(f"final: {result.final}")
    for line in next_steps(result.run_id, result.status, result.approvals):
        click.echo(line)


def _shown(result: RunResult, record: RunRecord) -> dict[str, Any]:
    return {
        **result.to_dict(),
        "principal": record.principal_id,
        "tenant": record.tenant_id,
        "policy_version": record.policy_version,
        "state_version": record.state_version,
        "messages": len(result.messages),
    }


# -- tether run ----------------------------------------------------------------------------------
def _typed_principal(
    app: App, subject: str | None, tenant: str | None, scopes: str | None
) -> Principal:
    from tether.core.principal import Principal

    base = app.principal
    return Principal(
        subject=subject or base.subject,
        tenant=tenant or base.tenant,
        scopes=parse_scopes(scopes) if scopes is not None else base.scopes,
    )


def _check_principal_flags(typed_given: bool, token: str | None, dev_identity: bool) -> None:
    """Refuse, before anything is opened, a principal nobody authenticated."""
    from tether.errors import IdentityError

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
    from tether.identity import authenticate

    if token is not None:
        who = authenticate(store, token, "principal")
        return who.principal(), {
            "principal_via": "token",
            "principal_credential": who.credential_id,
        }
    if dev_identity:
        note(DEV_IDENTITY_WARNING)
        return _typed_principal(app, *typed), {"principal_via": "dev", "dev_identity": True}
    return app.principal, {"principal_via": "app"}


@click.command("run")
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
    from tether.identity import read_token
    from tether.runs.app import load_app
    from tether.runs.runner import load_result

    typed = (subject, tenant, scopes)
    token = read_token("principal", token_file)
    _check_principal_flags(any(v is not None for v in typed), token, dev_identity)
    app = load_app(app_ref)
    with open_store(db, create=True) as store:
        principal, how = _run_principal(store, app, typed, token, dev_identity)
        runner = app.runner(store, metadata={"app": app_ref, **how})
        if enqueue:
            queued = runner.create_queued(message, principal, budget=app.budget, run_id=run_id)
            result = load_result(store, queued)
        else:
            result = runner.start(message, principal, budget=app.budget, run_id=run_id)
    if as_json:
        echo_json(result.to_dict())
    else:
        print_run(result)


POSITIVE = click.FloatRange(min=0, min_open=True)


@click.command("worker")
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
@click.option(
    "--quiet", is_flag=True, help="No start-up line and no line per run (the summary only)."
)
def worker_command(
    db: str,
    as_json: bool,
    app_ref: str,
    concurrency: int,
    lease_s: float,
    poll_s: float,
    idle_s: float | None,
    quiet: bool,
) -> None:
    """Claim and drive runnable runs until SIGTERM; shares the work with other workers.

    It says when it starts and, per run, when it claims and when the run stops, on stderr
    (stdout keeps the summary, one JSON line with --json)."""
    from tether.runs.app import load_app
    from tether.runs.worker import Worker

    def progress(line: str) -> None:
        click.echo(line, err=True)

    app = load_app(app_ref)
    with open_store(db, create=True) as store:
        worker = Worker(
            app,
            store,
            app_ref=app_ref,
            concurrency=concurrency,
            lease_s=lease_s,
            poll_s=poll_s,
            on_progress=None if quiet else progress,
        )
        worker.install_signal_handlers()
        if not quiet:
            until = f"idle for {idle_s:g} s" if idle_s is not None else "SIGTERM or Ctrl-C"
            progress(
                f"worker {worker.name}: driving runs of {app_ref} from {_where(db)}, "
                f"{concurrency} at a time, until {until}"
            )
        stats = worker.run(exit_when_idle_s=idle_s)
    if as_json:
        echo_json(stats.to_dict())
        return
    finished = ", ".join(f"{n} {status}" for status, n in sorted(stats.finished.items()))
    click.echo(
        f"worker {worker.name}: claimed {stats.claimed}, finished {finished or 'none'}"
        + (f", {stats.conflicts} conflict(s)" if stats.conflicts else "")
    )
    for error in stats.errors:
        click.echo(f"  error: {error}")


def _where(db: str) -> str:
    """The store's address as a log line may show it: a password in it masked."""
    from urllib.parse import urlsplit

    parts = urlsplit(db)
    if parts.password is None:
        return db
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username}:***@{host}").geturl()


@click.command("recover")
@DB_OPTION
@JSON_OPTION
@click.option("--app", "app_ref", envvar="TETHER_APP", required=True, help="module:attribute")
@click.option(
    "--in-flight",
    "in_flight_s",
    type=click.FloatRange(min=0),
    default=IN_FLIGHT_S,
    show_default=True,
    help="Seconds (beyond its tool's timeout) a framework run's dispatched call may still be "
    "in flight; only older ones are reconciled.",
)
def recover_command(db: str, as_json: bool, app_ref: str, in_flight_s: float) -> None:
    """Resume runs whose worker died, reconciling what they left unsettled.

    Runs a framework drives (no conversation in tether) are not resumed: only the effects
    their dead process left unsettled are reconciled; the framework's next call replays them."""
    from tether.runs.app import load_app
    from tether.runs.recovery import recover

    app = load_app(app_ref)
    with open_store(db, create=False) as store:
        report = recover(
            store, lambda: app.runner(store, metadata={"app": app_ref}), in_flight_s=in_flight_s
        )
    data = report.to_dict()
    if as_json:
        echo_json(data)
        return
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
    for run_id, why in report.skipped.items():
        click.echo(f"  {run_id} skipped: {why}")
    if report.settled_effects or report.in_flight:
        click.echo(
            "framework runs (not resumed; their framework replays what was settled): effects "
            + ", ".join(f"{k} {v}" for k, v in data["framework_effects_settled"].items())
        )
    for run_id, settled in report.settled_effects.items():
        for r in settled:
            click.echo(
                f"  {run_id}: {r.operation_key} {r.settlement.value}"
                + (f" ({r.detail})" if r.detail else "")
            )
    for run_id, keys in report.in_flight.items():
        for key in keys:
            click.echo(
                f"  {run_id}: {key} dispatched less than {in_flight_s:g}s (beyond its tool's "
                "timeout) ago, maybe still in flight; left for now (see --in-flight)"
            )


# -- tether runs ---------------------------------------------------------------------------------
@click.group()
def runs() -> None:
    """List, show, follow, resume, cancel and roll back agent runs."""


@runs.command("list")
@DB_OPTION
@JSON_OPTION
@click.option(
    "--status", type=click.Choice(RUN_STATUSES), default=None, help="Only runs in this status."
)
def runs_list(db: str, as_json: bool, status: str | None) -> None:
    """List runs, oldest first."""
    with look(db) as store:
        records = store.list_runs(status)
    if as_json:
        echo_json(
            [{k: v for k, v in r.to_dict().items() if k != "checkpoint_json"} for r in records]
        )
        return
    now = time.time()
    table(
        [
            Col("run", whole=True),
            Col("status", whole=True),
            Col("principal"),
            Col("tenant"),
            Col("created"),
            Col("updated"),
        ],
        (
            [
                r.run_id,
                r.status,
                r.principal_id,
                r.tenant_id,
                when(r.created_at),
                age(r.updated_at, now),
            ]
            for r in records
        ),
        empty=f"no {status} runs" if status else "no runs; start one with `tether run --app …`",
    )


@runs.command("show")
@DB_OPTION
@JSON_OPTION
@click.argument("run_id")
@click.option(
    "--follow",
    is_flag=True,
    help="Print steps as they happen, until the run finishes or waits for a human.",
)
def runs_show(db: str, as_json: bool, run_id: str, follow: bool) -> None:
    """Show a run: its status, steps and what it waits for."""
    from tether.errors import RunNotFound
    from tether.runs.log import load_result

    with look(db) as store:
        with store.read() as tx:
            record = tx.get_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id}; see `tether runs list`")
        if follow:
            try:
                record = _follow(store, record, quiet=as_json)
            except KeyboardInterrupt:
                sys.exit(130)  # asked to stop watching: nothing went wrong, nothing to say
        result = load_result(store, run_id)
    if as_json:
        echo_json(_shown(result, record))
        return
    if not follow:
        click.echo(
            f"run {run_id} for {record.principal_id} in tenant {record.tenant_id}, "
            f"policy {record.policy_version}; started {when(record.created_at)}, "
            f"updated {age(record.updated_at)}"
        )
        for step in result.steps:
            click.echo(step_line(step.index, step.kind, step.detail))
    print_outcome(result)


def _follow(store: Store, record: RunRecord, *, quiet: bool) -> RunRecord:
    """Print the run's steps as they are stored until it stops; the record as it stopped."""
    shown = 0
    if not quiet:
        click.echo(f"following run {record.run_id} ({record.status}); Ctrl-C stops watching")
    while True:
        with store.read() as tx:
            current = tx.get_run(record.run_id)
            steps: list[StepRecord] = tx.steps(record.run_id)
        for step in steps[shown:]:
            if not quiet:
                click.echo(step_line(step.turn, step.kind, step.detail))
        shown = len(steps)
        if current is None or current.status in STOPPED:
            return current or record
        if current.status == "running" and not _driven(current):
            # Nothing would ever move it: watching would wait forever.
            if not quiet:
                click.echo(
                    f"run {current.run_id} is running but nothing drives it (no live worker "
                    f"holds it); continue it with `tether runs resume {current.run_id}` or "
                    "`tether worker`"
                )
            return current
        time.sleep(FOLLOW_POLL_S)


def _driven(record: RunRecord) -> bool:
    """Whether a live driver holds the run's lease (a runner or a worker on it now)."""
    from tether.runs.leases import lease_held

    return lease_held(record, "", time.time())


@runs.command("resume")
@DB_OPTION
@JSON_OPTION
@APP_OPTION
@click.argument("run_id")
def runs_resume(db: str, as_json: bool, app_ref: str | None, run_id: str) -> None:
    """Continue a run from where it stopped (after approvals were decided, or a crash)."""
    with open_store(db, create=False) as store:
        app, ref = app_for_run(store, run_id, app_ref)
        result = app.runner(store, metadata={"app": ref}).resume(run_id)
    if as_json:
        echo_json(result.to_dict())
    else:
        print_run(result)


@runs.command("cancel")
@DB_OPTION
@JSON_OPTION
@click.argument("run_id")
@click.option("--reason", default=None, help="Why; recorded in the audit log.")
@approver_options
def runs_cancel(
    db: str,
    as_json: bool,
    run_id: str,
    reason: str | None,
    token_file: str | None,
    asserted: str | None,
) -> None:
    """Stop a run for good and close the approvals it waits for.

    Cancelling ends a run nobody can restart and answers its pending approvals for the
    approvers, so it takes an approver's credential (allowed for the run's tenant), like
    deciding one of them."""
    from tether.errors import RunNotFound
    from tether.identity import require_token
    from tether.runs.cancel import cancel

    token = require_token("approver", token_file, "cancelling a run")
    with open_store(db, create=False) as store:
        who = approver(store, token, asserted)
        with store.read() as tx:
            record = tx.get_run(run_id)
        if record is None:
            raise RunNotFound(f"no run {run_id}; see `tether runs list`")
        check_tenant(who, record.tenant_id, "cancel")
        done = cancel(
            store,
            run_id,
            actor=who.name,
            reason=reason,
            now=time.time(),
            credential=who.credential_id,
        )
    closed = [a.approval_id for a in done.closed]
    if as_json:
        row = {k: v for k, v in done.run.to_dict().items() if k != "checkpoint_json"}
        echo_json({**row, "closed_approvals": closed})
        return
    click.echo(f"run {run_id}: cancelled by {who.name} (was {record.status})")
    if closed:
        click.echo(f"  closed approval(s) it waited for: {', '.join(closed)}")


@runs.command("rollback")
@DB_OPTION
@JSON_OPTION
@APP_OPTION
@click.argument("run_id")
def runs_rollback(db: str, as_json: bool, app_ref: str | None, run_id: str) -> None:
    """Compensate the run's committed effects, newest first, each a governed call."""
    from tether.runs.recovery import rollback

    with open_store(db, create=False) as store:
        app, _ = app_for_run(store, run_id, app_ref)
        report = rollback(app.gate(store), run_id)
    if as_json:
        echo_json(report.to_dict())
        return
    click.echo(f"run {run_id}: compensated {len(report.compensated)} effect(s)")
    for approval_id in report.waiting:
        click.echo(f"  an undo waits for approval {approval_id}")
    if report.next:
        click.echo(f"  next: {report.next}")
    for key in report.not_compensable:
        click.echo(f"  {key} has no compensating tool: undo it by hand")
    if report.stopped:
        click.echo(f"  stopped: {report.stopped}")
