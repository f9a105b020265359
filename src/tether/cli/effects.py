"""``tether effects``: inspect the effect ledger, and say what happened to an unknown one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from tether.cli.common import DB_OPTION, JSON_OPTION
from tether.cli.output import Col, age, echo_json, table
from tether.cli.shared import (
    APP_OPTION,
    EFFECT_STATUSES,
    app_for_run,
    approver,
    approver_options,
    check_tenant,
    json_input,
    look,
    open_store,
)

if TYPE_CHECKING:
    from tether.core.ledger import Effect
    from tether.core.principal import Identity
    from tether.store.base import Store
    from tether.store.rows import RunRecord


@click.group()
def effects() -> None:
    """Inspect the effect ledger."""


@effects.command("list")
@DB_OPTION
@JSON_OPTION
@click.option("--run", "run_id", default=None, help="Only this run's effects.")
@click.option(
    "--status",
    type=click.Choice(EFFECT_STATUSES),
    default=None,
    help="Only effects in this status.",
)
def effects_list(db: str, as_json: bool, run_id: str | None, status: str | None) -> None:
    """List recorded effects, oldest first."""
    with look(db) as store:
        rows = [
            effect_row(e.to_dict())
            for e in store.list_effects(run_id)
            if status is None or e.status.value == status
        ]
    if as_json:
        echo_json(rows)
        return
    table(
        [
            Col("operation key", whole=True),
            Col("status", whole=True),
            Col("tool"),
            Col("run", whole=True),
            Col("reference"),
            Col("updated"),
            Col("error"),
        ],
        (
            [
                r["operation_key"],
                r["status"],
                r["tool_name"],
                r["run_id"],
                r["external_reference"] or "-",
                age(r["updated_at"]),
                r.get("error") or "",
            ]
            for r in rows
        ),
        empty="no effects recorded",
    )


def effect_row(row: dict[str, Any]) -> dict[str, Any]:
    from tether.core.approvals import mask_value

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
@APP_OPTION
@approver_options
def effects_resolve(
    db: str,
    as_json: bool,
    operation_key: str,
    committed: bool,
    absent: bool,
    result_json: str | None,
    app_ref: str | None,
    token_file: str | None,
    asserted: str | None,
) -> None:
    """Say what happened to an effect whose outcome is unknown; then run `tether recover`.

    Whoever says so decides whether a side effect is sent again, so it takes an approver's
    credential (allowed for the run's tenant), like deciding an approval."""
    from tether.identity import require_token
    from tether.runs.reconcile import resolve_effect

    _check_outcome(committed, absent, result_json)
    result = json_input(result_json, "--result") if result_json is not None else None
    token = require_token("approver", token_file, "resolving an effect")
    with open_store(db, create=False) as store:
        who = approver(store, token, asserted)
        with store.read() as tx:
            effect = tx.get_effect(operation_key)
            run = tx.get_run(effect.run_id) if effect is not None else None
        if run is not None:
            check_tenant(who, run.tenant_id, "resolve effects of")
        if effect is not None and run is not None:
            _check_resolver(store, effect, run, who, app_ref)
        settled = resolve_effect(
            store,
            operation_key,
            committed=committed,
            result=result,
            actor=who.name,
            now=time.time(),
        )
    if as_json:
        echo_json(effect_row(settled.to_dict()))
    else:
        click.echo(
            f"{operation_key}: {settled.status.value}; continue the run with "
            "`tether recover --app MODULE:ATTR`"
        )


def _check_resolver(
    store: Store, effect: Effect, run: RunRecord, who: Identity, app_ref: str | None
) -> None:
    """Saying whether a side effect happened decides whether it is sent again: an approval,
    so only an approver the policy names for that tool, and never the requester, may."""
    from tether.errors import ApprovalInvalid, ApproverNotAuthorized
    from tether.gate.desk import request_sealed

    with store.read() as tx:
        asked = tx.find_approval(run.run_id, effect.call_id)
    if asked is not None and not request_sealed(store.keys, asked):
        raise ApprovalInvalid(
            f"approval {asked.approval_id} for {effect.operation_key} is not as tether made it "
            "(its row was edited outside tether), so it names nobody who may resolve the "
            "effect; run `tether audit verify`"
        )
    if asked is not None:
        approvers = frozenset(asked.approvers)  # as the policy named them for this call
    else:
        app, _ = app_for_run(store, run.run_id, app_ref)  # the policy in force names them
        approvers = app.policy.approvers_for(effect.tool_name) if app.policy else frozenset()
    if who.name not in approvers or who.name == run.principal_id:
        raise ApproverNotAuthorized(
            f"{who.name} may not resolve {effect.operation_key}: only an approver the policy "
            f"names for '{effect.tool_name}' ({', '.join(sorted(approvers)) or 'none'}), "
            "never the requester, says whether it happened"
        )


def _check_outcome(committed: bool, absent: bool, result_json: str | None) -> None:
    """One outcome, said explicitly: a guess here decides whether a side effect is retried."""
    if committed and absent:
        raise click.UsageError("--committed and --absent contradict each other; give one")
    if not committed and not absent:
        raise click.UsageError("say what happened: --committed or --absent")
    if absent and result_json is not None:
        raise click.UsageError("--result is what a committed effect returned; drop it or --absent")
