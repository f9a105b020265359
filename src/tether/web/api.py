"""The JSON API: list, show, approve, deny and edit approvals, authenticated with an
approver credential as a bearer token (no cookies, so no CSRF token is needed). Errors are
``{"code", "message"}`` with stable codes; the models below make the OpenAPI document."""

# No ``from __future__ import annotations``: FastAPI reads the route functions' annotations
# at run time, and they name objects local to ``add_api``.
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from tether.core.approvals import ApprovalStatus
from tether.core.principal import Identity
from tether.errors import CredentialRefused
from tether.identity import authenticate
from tether.web.auth import credential_key
from tether.web.context import MAX_REASON, Site, client_key
from tether.web.service import ID_PATTERN, WebError

if TYPE_CHECKING:
    from tether.core.approvals import Approval

Status = Literal["pending", "approved", "denied", "expired", "used", "edited"]


class ErrorOut(BaseModel):
    code: str = Field(description="Stable: what went wrong, for programs to branch on.")
    message: str = Field(description="One sentence: what went wrong and what to do.")


class ApprovalOut(BaseModel):
    """An approval as shown: arguments masked where sensitive."""

    model_config = ConfigDict(extra="allow")
    approval_id: str
    run_id: str
    call_id: str
    status: Status
    tool: str
    tool_version: str
    resource: str
    tenant: str
    actor: str
    arguments: dict[str, Any]
    redacted: list[str]
    argument_digest: str
    call_digest: str
    policy_version: str
    approvers: list[str]
    created_at: float
    expires_at: float
    decided_at: float | None = None
    approver: str | None = None
    decision: str | None = None
    reason: str | None = None
    replaced_by: str | None = None
    replaces: str | None = None
    reasons: list[str] = Field(description="Why the policy asked for approval.")
    reason_asked: str = Field(description="The first reason, in one line (for a list).")
    risk: str | None = Field(
        default=None, description="The risk tier (read ... irreversible), if one decided."
    )
    summary: str = Field(description="The (masked) arguments in one line.")
    requester: str = Field(description="Who requested the call (the run's principal).")
    seconds_left: float = Field(description="Seconds until it expires (0: expired).")
    expired: bool
    can_decide: bool = Field(description="Whether the credential's holder may decide it now.")
    provenance: list[dict[str, Any]] | None = None


class ApprovalList(BaseModel):
    approvals: list[ApprovalOut]


class ApproveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, max_length=MAX_REASON)


class DenyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=MAX_REASON, description="Told to the model.")


class EditIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    arguments: dict[str, Any] = Field(description="The whole new argument object.")
    reason: str | None = Field(default=None, max_length=MAX_REASON)


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": what}
    for code, what in (
        (401, "no credential, or one not accepted"),
        (403, "not an approver of this tool, or the edit is denied by the policy"),
        (404, "no such approval in your tenants"),
        (400, "the body is not JSON (code invalid_json)"),
        (409, "not pending any more, expired, or changed meanwhile"),
        (422, "the request or the edited arguments are not valid"),
        (429, "too many refused credentials from this address; wait"),
        (503, "the store is unavailable"),
    )
}


def add_api(api: FastAPI, site: Site) -> None:
    store, inbox, limiter = site.store, site.inbox, site.limiter
    bearer = HTTPBearer(auto_error=False, description="An approver credential, tth_…")

    def api_identity(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Identity:
        if credentials is None:
            raise WebError(
                401,
                "credential_missing",
                "send an approver credential as 'Authorization: Bearer tth_…' "
                "(make one with `tether approvers add NAME --tenant T`)",
            )
        # Counted per address and per credential named, and only refusals are slowed: a
        # right credential is accepted whatever others sent from the same address.
        keys = [client_key(site, request), credential_key(credentials.credentials)]
        try:
            return authenticate(store, credentials.credentials, "approver")
        except CredentialRefused as e:
            if limiter.locked(keys) is not None:
                raise WebError(
                    429, "rate_limited", "too many refused credentials; wait a minute"
                ) from None
            for key in keys:
                if key is not None:
                    limiter.failed(key)
            raise WebError(401, "credential_refused", str(e)) from None

    def shown(who: Identity, approval: "Approval") -> ApprovalOut:
        row = inbox.row(who, approval)
        row.pop("tool_info", None)
        return ApprovalOut.model_validate({**row, "reason_asked": row["why"]})

    approval_id_param = PathParam(min_length=1, max_length=200, pattern=ID_PATTERN)

    @api.get("/api/approvals", response_model=ApprovalList, responses=ERRORS, tags=["approvals"])
    def list_approvals(
        who: Annotated[Identity, Depends(api_identity)],
        status: Annotated[Status | None, Query(description="Only this status.")] = None,
        run_id: Annotated[str | None, Query(max_length=200, description="Only this run.")] = None,
    ) -> ApprovalList:
        """The approvals of your tenants that name you as an approver, newest first. A
        pending approval past its expiry reads ``expired`` (and ``?status=expired`` finds
        it), not ``pending``."""
        rows = inbox.visible(who, ApprovalStatus(status) if status else None, run_id)
        return ApprovalList(approvals=[shown(who, a) for a in rows])

    @api.get(
        "/api/approvals/{approval_id}",
        response_model=ApprovalOut,
        responses=ERRORS,
        tags=["approvals"],
    )
    def show_approval(
        approval_id: Annotated[str, approval_id_param],
        who: Annotated[Identity, Depends(api_identity)],
    ) -> ApprovalOut:
        """One approval: the exact call, why it was asked for, by whom, until when."""
        return shown(who, inbox.get(who, approval_id))

    @api.post(
        "/api/approvals/{approval_id}/approve",
        response_model=ApprovalOut,
        responses=ERRORS,
        tags=["approvals"],
    )
    def approve(
        approval_id: Annotated[str, approval_id_param],
        who: Annotated[Identity, Depends(api_identity)],
        body: Annotated[ApproveIn | None, Body()] = None,
    ) -> ApprovalOut:
        """Approve the call exactly as proposed."""
        reason = body.reason if body else None
        return shown(who, inbox.decide(who, approval_id, approve=True, reason=reason))

    @api.post(
        "/api/approvals/{approval_id}/deny",
        response_model=ApprovalOut,
        responses=ERRORS,
        tags=["approvals"],
    )
    def deny(
        body: DenyIn,
        approval_id: Annotated[str, approval_id_param],
        who: Annotated[Identity, Depends(api_identity)],
    ) -> ApprovalOut:
        """Deny the call; the model is told the reason when the run resumes."""
        return shown(who, inbox.decide(who, approval_id, approve=False, reason=body.reason))

    @api.post(
        "/api/approvals/{approval_id}/edit",
        response_model=ApprovalOut,
        responses=ERRORS,
        tags=["approvals"],
    )
    def edit(
        body: EditIn,
        approval_id: Annotated[str, approval_id_param],
        who: Annotated[Identity, Depends(api_identity)],
    ) -> ApprovalOut:
        """Approve the call with other arguments: a new proposal, validated against the
        tool's schema and judged by the policy again. Answers the new approval."""
        return shown(who, inbox.edit(who, approval_id, body.arguments, body.reason))
