"""``tether approvals``: list, show and decide approval requests."""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

import click

from tether.cli.common import DB_OPTION, JSON_OPTION
from tether.cli.output import Col, age, arguments_text, echo_json, table, when
from tether.cli.shared import (
    APP_OPTION,
    APPROVAL_STATUSES,
    app_for_run,
    approver,
    approver_options,
    json_input,
    look,
    open_store,
    token_file_option,
)

if TYPE_CHECKING:
    from tether.core.approvals import Approval
    from tether.core.principal import Identity
    from tether.store import Store


@click.group()
def approvals() -> None:
    """List, show and decide approval requests (deciding needs an approver credential)."""


def _get_approval(store: Store, approval_id: str) -> Approval:
    from tether.errors import ApprovalStateError

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
    type=click.Choice(APPROVAL_STATUSES),
    default=None,
    help="Only approvals in this status.",
)
@click.option("--run", "run_id", default=None, help="Only this run's approvals.")
def approvals_list(db: str, as_json: bool, status: str | None, run_id: str | None) -> None:
    """List approval requests, oldest first (sensitive arguments masked)."""
    from tether.core.approvals import ApprovalStatus

    with look(db) as store:
        rows = store.list_approvals(ApprovalStatus(status) if status else None, run_id=run_id)
    shown = [a.public_dict() for a in rows]
    if as_json:
        echo_json(shown)
        return
    table(
        [
            Col("approval", whole=True),
            Col("status", whole=True),
            Col("tool"),
            Col("arguments"),
            Col("run", whole=True),
            Col("requested by"),
            Col("requested"),
            Col("expires"),
        ],
        (
            [
                a["approval_id"],
                a["status"],
                a["tool"],
                arguments_text(a["arguments"]),
                a["run_id"],
                a["actor"],
                age(a["created_at"]),
                age(a["expires_at"]) if a["status"] == "pending" else "-",
            ]
            for a in shown
        ),
        empty="no approvals" + (f" {status}" if status else ""),
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
    """Show what deciding one approval request needs: the exact call, why it was asked for,
    by whom, until when. Sensitive arguments are masked unless --reveal."""
    from tether.identity import authenticate, require_token

    token = require_token("approver", token_file, "--reveal") if reveal else None
    # Revealing writes its audit entry; only looking needs no write at all.
    with open_store(db, create=False, read_only=not reveal) as store:
        approval = _get_approval(store, approval_id)
        if token is not None:
            _record_reveal(store, approval, authenticate(store, token, "approver"))
        # Recorded on the approval since the data-flow policy; older ones: in the audit log.
        reasons = list(approval.reasons) or _reasons(store, approval)
    data = {**approval.public_dict(reveal=reveal), "reasons": reasons, "risk": _risk(reasons)}
    if as_json:
        echo_json(data)
        return
    for line in approval_lines(data):
        click.echo(line)


def _reasons(store: Store, approval: Approval) -> list[str]:
    """Why the policy asked for this approval, as recorded when it was requested (or, for an
    edit's new approval, when the edit was judged)."""
    for entry in store.audit_entries():
        if entry.run_id != approval.run_id:
            continue
        if entry.kind not in ("approval_requested", "approval_edited"):
            continue
        data = entry.record.get("data", {})
        if entry.kind == "approval_requested" and data.get("approval_id") == approval.approval_id:
            return [str(r) for r in data.get("reasons", [])]
        if entry.kind == "approval_edited" and data.get("replaced_by") == approval.approval_id:
            return [str(r) for r in data.get("decision", {}).get("reasons", [])]
    return []


_TIER = re.compile(r"^tier (\w+):")


def _risk(reasons: list[str]) -> str | None:
    """The tool's risk tier, when the policy's verdict came from it ("tier write: ask");
    None when a rule for the tool itself decided."""
    for reason in reasons:
        found = _TIER.match(reason)
        if found:
            return found.group(1)
    return None


def _record_reveal(store: Store, approval: Approval, who: Identity) -> None:
    """Seeing the arguments in clear is itself a decision someone answers for."""
    from tether.errors import ApprovalInvalid, ApproverNotAuthorized
    from tether.gate.desk import request_sealed

    if not request_sealed(store.keys, approval):  # its approvers list may have been edited
        raise ApprovalInvalid(f"approval {approval.approval_id} was edited outside tether")
    if not who.allows_tenant(approval.tenant):
        raise ApproverNotAuthorized(
            f"{who.name}'s credential is not valid for tenant {approval.tenant}, so it cannot "
            f"reveal approval {approval.approval_id}; ask an approver of that tenant"
        )
    # Only who may decide the call may see what it carries: an approver the request names,
    # never the one who asked.
    if who.name not in approval.approvers or who.name == approval.actor:
        raise ApproverNotAuthorized(
            f"{who.name} is not an approver of approval {approval.approval_id} (its approvers: "
            f"{', '.join(sorted(approval.approvers)) or 'none'}), so cannot reveal its "
            "arguments; ask one of them"
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


def approval_lines(data: dict[str, Any], now: float | None = None) -> list[str]:
    aid = data["approval_id"]
    status = data["status"]
    headline = f"approval {aid}: {status}"
    if status == "pending":
        expires = age(data["expires_at"], now)
        headline += "; expired" if expires.endswith("ago") else f"; expires {expires}"
    lines = [
        headline,
        f"  tool       {data['tool']} v{data['tool_version']} on {data['resource']}",
        f"  risk tier  {data.get('risk') or '- (decided by a rule for this tool)'}",
        f"  arguments  {json.dumps(data['arguments'], ensure_ascii=False)}",
    ]
    if data["redacted"]:
        lines.append(
            f"  masked     {', '.join(data['redacted'])} "
            f"(see them with: tether approvals show {aid} --reveal)"
        )
    lines += [
        f"  digest     {data['argument_digest']} (arguments); call {data['call_digest']}",
        f"  requested  by {data['actor']} in tenant {data['tenant']}, "
        f"{when(data['created_at'])} ({age(data['created_at'], now)})",
        f"  run        {data['run_id']}",
        f"  policy     {data['policy_version']}; approvers: {', '.join(data['approvers']) or '-'}",
        f"  expires    {when(data['expires_at'])}",
    ]
    for i, reason in enumerate(data.get("reasons") or []):
        lines.append(f"  {'reasons' if i == 0 else '':<10} {reason}")
    for i, origin in enumerate(data.get("provenance") or []):
        lines.append(f"  {'provenance' if i == 0 else '':<10} {provenance_line(origin)}")
    if data["decision"]:
        by = data["approver"] + (
            f" ({data['approver_credential']})" if data["approver_credential"] else ""
        )
        why = f": {data['reason']}" if data["reason"] else ""
        lines.append(f"  decided    {data['decision']} by {by} {when(data['decided_at'])}{why}")
    if data.get("replaced_by"):
        lines.append(f"  replaced   by approval {data['replaced_by']} (an edit)")
    if data.get("replaces"):
        lines.append(f"  replaces   approval {data['replaces']} (an edit)")
    if status == "pending":
        lines += [
            "decide with an approver credential (TETHER_APPROVER_TOKEN or --token-file):",
            f"  tether approvals approve {aid}",
            f"  tether approvals deny {aid} --reason WHY",
            f"  tether approvals edit {aid} --arguments '{{...}}'",
        ]
    return lines


def provenance_line(origin: dict[str, Any]) -> str:
    """Where one argument's value came from, as ``approvals show`` prints it."""
    value = json.dumps(origin.get("value"), ensure_ascii=False)
    where = f"{origin['argument']} = {value}: "
    identifier = f" ({origin['identifier']!r})" if origin.get("identifier") else ""
    trust = origin.get("trust")
    if trust == "untrusted" and origin.get("call_id"):
        return (
            f"{where}untrusted{identifier}, first seen in the output of `{origin['tool']}` "
            f"call {origin['call_id']}; not in the user's request"
        )
    if trust == "unknown":
        return f"{where}in no trusted input{identifier}: not in the user's request"
    if trust == "untrusted":
        return f"{where}untrusted{identifier}"
    return where + ("trusted" + identifier if trust == "trusted" else "nothing to check")


def _decided(store: Store, approval: Approval, as_json: bool, *, edited: str | None = None) -> None:
    if as_json:
        echo_json(approval.public_dict())
        return
    with store.read() as tx:
        run = tx.get_run(approval.run_id)
    shown = (
        approval.approval_id if edited is None else f"{edited} replaced by {approval.approval_id}"
    )
    tail = "" if edited is None else " with the edited arguments"
    click.echo(f"approval {shown}: {approval.status.value} by {approval.approver}{tail}")
    if run is None:
        return
    from tether.core.lifecycle import UNDO_PREFIX

    if approval.call_id.startswith(UNDO_PREFIX):
        # An undo belongs to a rollback, which is re-run; resuming would not touch it.
        click.echo(f"continue the rollback with: tether runs rollback {run.run_id}")
        return
    if run.status == "queued":
        click.echo(
            f"continue the run with: tether runs resume {run.run_id} "
            "(or let a `tether worker` pick it up)"
        )
    elif run.status == "awaiting_approval":
        pending = [
            a.approval_id
            for a in store.list_approvals(run_id=run.run_id)
            if a.status.value == "pending"
        ]
        if pending:
            click.echo(f"run {run.run_id} still waits for: {', '.join(pending)}")
        else:
            click.echo(f"continue the run with: tether runs resume {run.run_id}")


def _decide(
    db: str,
    approval_id: str,
    token_file: str | None,
    asserted: str | None,
    as_json: bool,
    **how: Any,
) -> None:
    from tether.gate.desk import decide_approval
    from tether.identity import require_token

    token = require_token("approver", token_file, "deciding an approval")
    with open_store(db, create=False) as store:
        who = approver(store, token, asserted)
        decided = decide_approval(store, approval_id, who, now=time.time(), **how)
        _decided(store, decided, as_json)


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
    _decide(db, approval_id, token_file, asserted, as_json, approve=True, reason=reason)


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
    _decide(db, approval_id, token_file, asserted, as_json, approve=False, reason=reason)


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
    """Approve a pending call with other arguments: a new proposal, judged by the policy.
    The edit is a new approval with its own id, which replaces this one."""
    from tether.errors import ApprovalStateError
    from tether.gate.desk import edit_approval
    from tether.identity import require_token

    arguments = json_input(arguments_json, "--arguments")
    if not isinstance(arguments, dict):
        raise click.BadParameter(
            "must be a JSON object, e.g. '{\"k\": 1}'", param_hint="--arguments"
        )
    token = require_token("approver", token_file, "editing an approval")
    with open_store(db, create=False) as store:
        who = approver(store, token, asserted)
        found = _get_approval(store, approval_id)
        app, _ = app_for_run(store, found.run_id, app_ref)
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
        _decided(store, edited, as_json, edited=approval_id)
