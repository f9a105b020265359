"""The inbox pages: sign in, the inbox (live), one approval (approve, deny, edit through a
form made from the tool's schema), history and a run's trail. A session cookie (or a trusted
proxy's header) says who is signed in; every form carries the session's CSRF token."""

# No ``from __future__ import annotations``, as in ``api``: FastAPI reads the annotations.
import asyncio
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from tether.core.approvals import ApprovalStatus
from tether.core.principal import Identity
from tether.errors import CredentialRefused
from tether.identity import authenticate
from tether.web.auth import COOKIE, Session, csrf_ok, identity_by_name, identity_for
from tether.web.context import MAX_REASON, Site, client_key, peer_of
from tether.web.forms import FormField, form_fields, read_form, refill
from tether.web.service import WebError

if TYPE_CHECKING:
    from tether.core.approvals import Approval

ErrorPage = Callable[[Request, WebError], Response]


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


def add_pages(api: FastAPI, site: Site) -> ErrorPage:
    """Add the pages' routes; returns how a refusal is shown as a page."""
    store, inbox, sessions, limiter = site.store, site.inbox, site.sessions, site.limiter
    templates, config = site.templates, site.config

    def page_identity(request: Request, session: Session) -> Identity | None:
        proxy = config.proxy
        if proxy is not None and proxy.header and proxy.trusts(peer_of(request)):
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
            response = HTMLResponse(html, headers={"Cache-Control": "no-store"})
            set_cookie(request, response, session)  # the id may just have rotated
            return response

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
            client = client_key(site, request)
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
            # Looked up afresh at every poll: a stream ends with its session or credential.
            session = sessions.peek(request.cookies.get(COOKIE))
            anonymous = Session(sid="", csrf="", started_at=0, issued_at=0, last_seen=0)
            return page_identity(request, session or anonymous)

        if await run_in_threadpool(who_is_it) is None:
            return Response("sign in first", 401, media_type="text/plain")

        def pending() -> str | None:
            who = who_is_it()
            if who is None:
                return None
            return ",".join(a.approval_id for a in inbox.decidable(who))

        async def stream() -> Any:
            last, quiet = None, 0.0
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                now = await run_in_threadpool(pending)
                if now is None:
                    yield "event: signed-out\ndata: 0\n\n"
                    return
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

    def error_page(request: Request, e: WebError) -> Response:
        session = sessions.current(request.cookies.get(COOKIE))
        who = page_identity(request, session)
        return page(request, session, who, "error.html", {"title": e.message}, e.status)

    return error_page
