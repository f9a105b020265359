"""The ASGI application ``tether serve`` runs: the inbox pages and the JSON API.

Pages authenticate with a session cookie (or a trusted proxy's header) and check a CSRF token
on every form; the API authenticates with the approver credential as a bearer token, takes no
cookies (so it needs no CSRF token), and answers errors as ``{"code", "message"}``. Both
decide through ``tether.web.service.Inbox``, which decides through ``tether.decisions``.

Every response carries a strict Content-Security-Policy: scripts only from this origin (the
one small file in ``static/``), no inline script or style, no framing. Arguments are
attacker-controlled: they reach the page only through Jinja's autoescaping, as text.
"""

# No ``from __future__ import annotations``: FastAPI reads the route functions' annotations
# at run time, and they name objects local to ``create_app``.
import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import jinja2
from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.approvals import ApprovalStatus
from tether.errors import CredentialRefused
from tether.identity import Identity, authenticate
from tether.web.auth import (
    COOKIE,
    Limiter,
    ProxyAuth,
    Session,
    Sessions,
    csrf_ok,
    identity_by_name,
    identity_for,
)
from tether.web.forms import FormField, form_fields, read_form, refill
from tether.web.service import Inbox, WebError

if TYPE_CHECKING:
    from tether.approvals import Approval
    from tether.store import Store

HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]
Status = Literal["pending", "approved", "denied", "expired", "used", "edited"]
MAX_REASON = 2000


@dataclass
class WebConfig:
    store: "Store"
    app_ref: str | None = None
    proxy: ProxyAuth | None = None
    secure_cookies: bool = False  # also set when the request came over https
    session_ttl_s: float = 8 * 3600.0
    session_idle_s: float = 1800.0
    session_rotate_s: float = 900.0
    signin_limit: int = 5
    signin_window_s: float = 60.0
    live_poll_s: float = 1.0
    clock: Callable[[], float] = time.time
    sessions: Sessions = field(init=False)
    limiter: Limiter = field(init=False)

    def __post_init__(self) -> None:
        self.sessions = Sessions(
            ttl_s=self.session_ttl_s,
            idle_s=self.session_idle_s,
            rotate_s=self.session_rotate_s,
            clock=self.clock,
        )
        self.limiter = Limiter(
            limit=self.signin_limit, window_s=self.signin_window_s, clock=self.clock
        )


# -- the API's shapes (they make the OpenAPI document) -----------------------------------------
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
    risk: str | None = None
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
        (409, "not pending any more, expired, or changed meanwhile"),
        (422, "the request or the edited arguments are not valid"),
        (429, "too many refused credentials from this address; wait"),
        (503, "the store is unavailable"),
    )
}


# -- helpers -----------------------------------------------------------------------------------
class SecurityHeaders:
    """Adds the security headers to every response (pages, API, static files, errors)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _when(value: Any) -> str:
    if not isinstance(value, int | float):
        return "-"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def provenance_rows(provenance: Any) -> list[dict[str, Any]]:
    """The provenance the policy recorded, as table rows (tolerant of its exact keys)."""
    if not isinstance(provenance, list):
        return []
    rows = []
    for p in provenance:
        if not isinstance(p, Mapping):
            continue
        value = p.get("value", p.get("masked_value"))
        source = [
            str(p[k]) for k in ("source", "tool", "call_id", "from_call") if p.get(k) is not None
        ]
        rows.append(
            {
                "argument": str(p.get("argument", p.get("name", "?"))),
                "value": value if isinstance(value, str) else json.dumps(value),
                "source": " · ".join(source) or "-",
                "trusted": bool(p.get("trusted")),
            }
        )
    return rows


def _summary(data: Mapping[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 300 else text[:297] + "..."


def make_templates() -> jinja2.Environment:
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template is HTML; arguments must arrive as text
        undefined=jinja2.StrictUndefined,
    )
    templates.filters["when"] = _when
    return templates


def create_app(config: WebConfig) -> FastAPI:
    store = config.store
    inbox = Inbox(store, app_ref=config.app_ref, clock=config.clock)
    sessions, limiter = config.sessions, config.limiter
    templates = make_templates()

    api = FastAPI(
        title="tether approvals API",
        version="1",
        description=(
            "List, show and decide approval requests. Authenticate with an approver "
            "credential (`tether approvers add NAME --tenant T`) as a bearer token. The same "
            "rules as the inbox pages and the command line: no self-approval, only the "
            "approvers the policy names, only your tenants (others' approvals are not found)."
        ),
        openapi_url="/api/openapi.json",
        docs_url=None,  # Swagger UI loads scripts from a CDN, which the CSP refuses
        redoc_url=None,
    )
    api.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    bearer = HTTPBearer(auto_error=False, description="An approver credential, tth_…")

    def client_of(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    # -- errors --------------------------------------------------------------------------------
    def error_json(e: WebError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else {}
        if e.code == "rate_limited":
            headers["Retry-After"] = "60"
        return JSONResponse({"code": e.code, "message": e.message}, e.status, headers)

    def is_api(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    async def on_web_error(request: Request, e: Exception) -> Response:
        assert isinstance(e, WebError)
        if is_api(request):
            return error_json(e)

        def show() -> Response:
            session = sessions.current(request.cookies.get(COOKIE))
            who = page_identity(request, session)
            return page(request, session, who, "error.html", {"title": e.message}, e.status)

        return await run_in_threadpool(show)

    async def on_invalid(request: Request, e: Exception) -> Response:
        assert isinstance(e, RequestValidationError)
        problems = [
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}"
            for err in e.errors()
        ]
        return error_json(WebError(422, "invalid_request", "; ".join(problems)[:1000]))

    async def on_http(request: Request, e: Exception) -> Response:
        assert isinstance(e, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        error = WebError(e.status_code, code, str(e.detail))
        if is_api(request):
            return error_json(error)
        return await on_web_error(request, error)

    api.add_exception_handler(WebError, on_web_error)
    api.add_exception_handler(RequestValidationError, on_invalid)
    api.add_exception_handler(StarletteHTTPException, on_http)

    # -- the API -------------------------------------------------------------------------------
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
        client = client_of(request)
        if limiter.retry_after(client) is not None:
            raise WebError(429, "rate_limited", "too many refused credentials; wait a minute")
        try:
            return authenticate(store, credentials.credentials, "approver")
        except CredentialRefused as e:
            limiter.failed(client)
            raise WebError(401, "credential_refused", str(e)) from None

    def shown(who: Identity, approval: "Approval") -> ApprovalOut:
        return ApprovalOut.model_validate(inbox.details(who, approval))

    approval_id_param = PathParam(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.~\-]+$")

    @api.get("/api/approvals", response_model=ApprovalList, responses=ERRORS, tags=["approvals"])
    def list_approvals(
        who: Annotated[Identity, Depends(api_identity)],
        status: Annotated[Status | None, Query(description="Only this status.")] = None,
        run_id: Annotated[str | None, Query(max_length=200, description="Only this run.")] = None,
    ) -> ApprovalList:
        """The approvals of your tenants, newest first."""
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

    # -- pages ---------------------------------------------------------------------------------
    def page_identity(request: Request, session: Session) -> Identity | None:
        proxy = config.proxy
        if proxy is not None and proxy.trusts(client_of(request)):
            name = request.headers.get(proxy.header)
            if name:
                return identity_by_name(store, name.strip(), "proxy")
        if session.credential_id is None:
            return None
        return identity_for(store, session.credential_id, "web")

    def page(
        request: Request,
        session: Session,
        who: Identity | None,
        template: str,
        context: dict[str, Any],
        status: int = 200,
    ) -> HTMLResponse:
        context = {"who": who, "csrf": session.csrf, "notice": None, "error": None, **context}
        html = templates.get_template(template).render(context)
        response = HTMLResponse(html, status, headers={"Cache-Control": "no-store"})
        set_cookie(request, response, session)
        return response

    def set_cookie(request: Request, response: Response, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            session.sid,
            max_age=int(config.session_ttl_s),
            httponly=True,
            samesite="strict",
            secure=config.secure_cookies or request.url.scheme == "https",
            path="/",
        )

    def redirect(request: Request, session: Session, to: str) -> Response:
        response = RedirectResponse(to, status_code=303)
        set_cookie(request, response, session)
        return response

    Handler = Callable[[Session, Identity], Response]

    async def signed_in(request: Request, handler: Handler) -> Response:
        """Run ``handler`` for the signed-in approver, or show the sign-in page."""

        def go() -> Response:
            session = sessions.current(request.cookies.get(COOKIE))
            who = page_identity(request, session)
            if who is None:
                return page(request, session, None, "signin.html", {}, 200)
            return handler(session, who)

        return await run_in_threadpool(go)

    FormHandler = Callable[[Session, Identity, Mapping[str, str]], Response]

    async def posted(request: Request, handler: FormHandler) -> Response:
        """A form post: the session's CSRF token first, then the signed-in approver."""
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}

        def go() -> Response:
            session = sessions.current(request.cookies.get(COOKIE))
            if not csrf_ok(session, form.get("csrf")):
                title = "This form has expired or did not come from this inbox; reload the page."
                return page(request, session, None, "error.html", {"title": title}, 403)
            who = page_identity(request, session)
            if who is None:
                return page(request, session, None, "signin.html", {}, 401)
            return handler(session, who, form)

        return await run_in_threadpool(go)

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home(request: Request) -> Response:
        def show(session: Session, who: Identity) -> Response:
            rows = inbox.decidable(who)
            return page(request, session, who, "inbox.html", {"rows": rows})

        return await signed_in(request, show)

    @api.get("/fragments/inbox", response_class=HTMLResponse, include_in_schema=False)
    async def inbox_rows(request: Request) -> Response:
        def show(session: Session, who: Identity) -> Response:
            html = templates.get_template("_rows.html").render(rows=inbox.decidable(who))
            return HTMLResponse(html, headers={"Cache-Control": "no-store"})

        return await signed_in(request, show)

    @api.get("/signin", response_class=HTMLResponse, include_in_schema=False)
    async def signin_page(request: Request) -> Response:
        return await signed_in(request, lambda session, who: redirect(request, session, "/"))

    @api.post("/signin", include_in_schema=False)
    async def signin(request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}

        def go() -> Response:
            session = sessions.current(request.cookies.get(COOKIE))
            if not csrf_ok(session, form.get("csrf")):
                error = "The sign-in form expired; try again."
                return page(request, session, None, "signin.html", {"error": error}, 403)
            client = client_of(request)
            wait = limiter.retry_after(client)
            if wait is not None:
                error = f"Too many refused credentials; try again in {wait:.0f} seconds."
                response = page(request, session, None, "signin.html", {"error": error}, 429)
                response.headers["Retry-After"] = f"{wait:.0f}"
                return response
            try:
                who = authenticate(store, form.get("token", ""), "approver")
            except CredentialRefused:
                limiter.failed(client)
                error = "That credential was not accepted (unknown, revoked, or not an approver's)."
                return page(request, session, None, "signin.html", {"error": error}, 401)
            assert who.credential_id is not None
            return redirect(request, sessions.sign_in(session, who.credential_id), "/")

        return await run_in_threadpool(go)

    @api.post("/signout", include_in_schema=False)
    async def signout(request: Request) -> Response:
        return await posted(
            request, lambda session, who, form: redirect(request, sessions.end(session), "/")
        )

    def approval_page(
        request: Request,
        session: Session,
        who: Identity,
        approval_id: str,
        *,
        status: int = 200,
        notice: str | None = None,
        error: str | None = None,
        values: Mapping[str, str] | None = None,
    ) -> Response:
        approval = inbox.get(who, approval_id)
        data = inbox.details(who, approval)
        fields, edit_note = edit_fields(approval, data)
        if values is not None:  # a refused edit: show what was typed, not the original
            fields = [refill(f, values) for f in fields]
        context = {
            "a": data,
            "arguments_json": json.dumps(data["arguments"], indent=2, ensure_ascii=False),
            "provenance": provenance_rows(data.get("provenance")),
            "steps": inbox.steps(approval.run_id),
            "fields": fields,
            "edit_note": edit_note,
            "edit_open": values is not None,
            "notice": notice,
            "error": error,
        }
        return page(request, session, who, "approval.html", context, status)

    def edit_fields(approval: "Approval", data: dict[str, Any]) -> tuple[list[FormField], str]:
        manifest = inbox.manifest(approval)
        if manifest is None:
            return [], (
                "Editing needs the app's tool schemas: start tether serve with --app, "
                "or run the agent with --app."
            )
        masked = frozenset(data["redacted"])
        return form_fields(manifest.parameters, approval.arguments, masked), ""

    @api.get("/approvals/{approval_id}", response_class=HTMLResponse, include_in_schema=False)
    async def approval_view(request: Request, approval_id: str) -> Response:
        done = request.query_params.get("done")
        notice = {
            "approve": "Approved. The run continues.",
            "deny": "Denied. The model will be told why.",
            "edit": "Approved with your edited arguments (this is the new approval).",
        }.get(done or "")
        return await signed_in(
            request,
            lambda session, who: approval_page(request, session, who, approval_id, notice=notice),
        )

    async def decide_route(request: Request, approval_id: str, action: str) -> Response:
        def handle(session: Session, who: Identity, form: Mapping[str, str]) -> Response:
            reason = (form.get("reason") or "").strip()[:MAX_REASON] or None
            try:
                if action == "edit":
                    approval = inbox.get(who, approval_id)
                    fields, note = edit_fields(approval, inbox.details(who, approval))
                    if not fields:
                        raise WebError(409, "edit_unavailable", note)
                    arguments, problems = read_form(fields, form, approval.arguments)
                    if problems:
                        raise WebError(422, "invalid_arguments", "; ".join(problems))
                    new = inbox.edit(who, approval_id, arguments, reason)
                    return redirect(request, session, f"/approvals/{new.approval_id}?done=edit")
                if action == "deny" and reason is None:
                    raise WebError(
                        422, "reason_required", "Say why you deny it: the model is told."
                    )
                inbox.decide(who, approval_id, approve=action == "approve", reason=reason)
            except WebError as e:
                if e.status == 404:
                    raise
                values = form if action == "edit" else None
                return approval_page(
                    request,
                    session,
                    who,
                    approval_id,
                    status=e.status,
                    error=e.message,
                    values=values,
                )
            return redirect(request, session, f"/approvals/{approval_id}?done={action}")

        return await posted(request, handle)

    @api.post("/approvals/{approval_id}/approve", include_in_schema=False)
    async def approve_form(request: Request, approval_id: str) -> Response:
        return await decide_route(request, approval_id, "approve")

    @api.post("/approvals/{approval_id}/deny", include_in_schema=False)
    async def deny_form(request: Request, approval_id: str) -> Response:
        return await decide_route(request, approval_id, "deny")

    @api.post("/approvals/{approval_id}/edit", include_in_schema=False)
    async def edit_form(request: Request, approval_id: str) -> Response:
        return await decide_route(request, approval_id, "edit")

    @api.get("/history", response_class=HTMLResponse, include_in_schema=False)
    async def history(request: Request) -> Response:
        def show(session: Session, who: Identity) -> Response:
            rows = [a for a in inbox.visible(who) if a.status is not ApprovalStatus.PENDING]
            context = {"rows": rows[:200], "verify": inbox.verify()}
            return page(request, session, who, "history.html", context)

        return await signed_in(request, show)

    @api.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    async def run_trail(request: Request, run_id: str) -> Response:
        def show(session: Session, who: Identity) -> Response:
            trail = [{**e, "summary": _summary(e["data"])} for e in inbox.trail(who, run_id)]
            context = {"run_id": run_id, "trail": trail, "verify": inbox.verify()}
            return page(request, session, who, "run.html", context)

        return await signed_in(request, show)

    @api.get("/events", include_in_schema=False)
    async def events(request: Request) -> Response:
        """Server-sent events: "inbox" whenever the pending approvals the approver may
        decide change (the page then fetches the rows)."""

        def who_is_it() -> Identity | None:
            return page_identity(request, sessions.current(request.cookies.get(COOKIE)))

        who = await run_in_threadpool(who_is_it)
        if who is None:
            return Response("sign in first", 401, media_type="text/plain")
        signed: Identity = who

        def pending() -> str:
            return ",".join(a.approval_id for a in inbox.decidable(signed))

        async def stream() -> Any:
            last, quiet = None, 0.0
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                now = await run_in_threadpool(pending)
                if now != last:
                    last, quiet = now, 0.0
                    yield f"event: inbox\ndata: {len(now.split(',')) if now else 0}\n\n"
                elif quiet >= 15:
                    quiet = 0.0
                    yield ": still here\n\n"
                await asyncio.sleep(config.live_poll_s)
                quiet += config.live_poll_s

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    api.add_middleware(SecurityHeaders)
    return api
