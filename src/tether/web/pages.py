"""The inbox pages: sign in, the inbox (live), one approval (approve, deny, edit through a
form made from the tool's schema), history and a run's trail. A session cookie (or a trusted
proxy's header) says who is signed in; every form carries the session's CSRF token."""

# No ``from __future__ import annotations``, as in ``api``: FastAPI reads the annotations.
import asyncio
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from tether.core.approvals import ApprovalStatus
from tether.core.principal import Identity
from tether.web import triage
from tether.web.auth import COOKIE, Session
from tether.web.context import MAX_REASON, Site
from tether.web.door import Door, add_door
from tether.web.forms import FormField, form_fields, read_form, refill
from tether.web.service import WebError, status_now

if TYPE_CHECKING:
    from tether.core.approvals import Approval

ErrorPage = Callable[[Request, WebError], Response]
FILTERS = ("tier", "tool", "run", "tenant", "q", "sort")


def provenance_verdict(p: Mapping[str, Any]) -> tuple[str, str]:
    """What the page says of one value's provenance, and its class: a value the policy did
    not look at is "not checked", never trusted; an untrusted one says where it came from."""
    if p.get("checked") is False:
        return "not checked", "unchecked"
    trust = p.get("trust")
    if trust is None and p.get("trusted"):  # an older record: only the boolean
        return "checked: in trusted input", "trusted"
    if trust == "trusted":
        return "checked: in the user's request or a trusted record", "trusted"
    if trust == "none":
        return "checked: nothing in it to trace (no identifier)", "none"
    if trust == "unknown":
        return (
            "untrusted: in nothing this run has seen (made up, or changed past matching)",
            "untrusted",
        )
    where = p.get("tool")
    if where:
        return f"untrusted: first seen in the output of {where} (call {p.get('call_id')})", (
            "untrusted"
        )
    return "untrusted", "untrusted"


def provenance_rows(provenance: Any) -> list[dict[str, Any]]:
    """The provenance the policy recorded, as table rows (tolerant of its exact keys)."""
    if not isinstance(provenance, list):
        return []
    rows = []
    for p in provenance:
        if not isinstance(p, Mapping):
            continue
        value = p.get("value", p.get("masked_value"))
        verdict, kind = provenance_verdict(p)
        part = p.get("identifier")
        rows.append(
            {
                "argument": str(p.get("argument", p.get("name", "?"))),
                "value": value if isinstance(value, str) else json.dumps(value),
                # The untrusted part of a longer value, named.
                "part": str(part) if part is not None and kind == "untrusted" else None,
                "verdict": verdict,
                "kind": kind,
            }
        )
    return rows


def _summary(data: Mapping[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 300 else text[:297] + "..."


def add_pages(api: FastAPI, site: Site) -> ErrorPage:
    """Add the pages' routes; returns how a refusal is shown as a page."""
    inbox, sessions = site.inbox, site.sessions
    templates, config = site.templates, site.config
    door = Door(site)
    add_door(api, door)
    page, redirect, signed_in, posted = door.page, door.redirect, door.signed_in, door.posted

    def triage_context(request: Request, who: Identity) -> dict[str, Any]:
        query = {k: v for k, v in request.query_params.items() if k in FILTERS}
        rows = [inbox.row(who, a) for a in inbox.decidable(who)]
        shown = triage.filtered(rows, query)
        return {
            "rows": shown,
            "total": len(rows),
            "query": query,
            "choices": triage.choices(rows),
            "sorts": triage.SORTS,
        }

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def home(request: Request) -> Response:
        def show(session: Session, who: Identity) -> Response:
            return page(request, session, who, "inbox.html", triage_context(request, who))

        return await signed_in(request, show)

    @api.get("/fragments/inbox", response_class=HTMLResponse, include_in_schema=False)
    async def inbox_rows(request: Request) -> Response:
        def show(session: Session, who: Identity) -> Response:
            html = templates.get_template("_rows.html").render(triage_context(request, who))
            response = HTMLResponse(html, headers={"Cache-Control": "no-store"})
            door.set_cookie(request, response, session)  # the id may just have rotated
            return response

        return await signed_in(request, show)

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
        queue = [a.approval_id for a in inbox.decidable(who)]
        position = queue.index(approval_id) if approval_id in queue else None
        others = [q for q in queue if q != approval_id]
        previous = queue[position - 1] if position else None
        following = (
            queue[position + 1]
            if position is not None and position + 1 < len(queue)
            else (others[0] if position is None and others else None)
        )
        if values is not None:  # a refused edit: show what was typed, not the original
            fields = [refill(f, values) for f in fields]
        context = {
            "a": data,
            "arguments_json": json.dumps(data["arguments"], indent=2, ensure_ascii=False),
            "provenance": provenance_rows(data.get("provenance")),
            "steps": inbox.steps(approval.run_id),
            "turns": inbox.conversation(approval.run_id),
            "confirm": data.get("risk") in triage.CONFIRM_TIERS,
            "previous": previous,
            "following": following,
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
        goes_on = (
            "The run continues here."
            if config.resumes_runs
            else "The run continues when its worker or `tether resume` picks it up."
        )
        notice = {
            "approve": f"Approved. {goes_on}",
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
                if action in ("approve", "edit") and not confirmed(who, approval_id, form):
                    raise WebError(
                        422,
                        "confirmation_required",
                        "This call cannot be undone (or administers something): type the "
                        "tool's name to confirm you approve it.",
                    )
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

    def confirmed(who: Identity, approval_id: str, form: Mapping[str, str]) -> bool:
        """An irreversible or admin call is approved only with its tool's name typed."""
        approval = inbox.get(who, approval_id)
        if inbox.details(who, approval).get("risk") not in triage.CONFIRM_TIERS:
            return True
        return (form.get("confirm") or "").strip() == approval.tool

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
            query = {k: v for k, v in request.query_params.items() if k == "status"}
            wanted = query.get("status")
            now = site.config.clock()
            found = [
                a
                for a in inbox.visible(who)
                if status_now(a, now) is not ApprovalStatus.PENDING
                and (not wanted or status_now(a, now).value == wanted)
            ]
            rows = [inbox.row(who, a) for a in found[:200]]  # the newest 200, each read once
            context = {"rows": rows, "verify": inbox.verify(), "wanted": wanted}
            return page(request, session, who, "history.html", context)

        return await signed_in(request, show)

    @api.get("/runs/{run_id:path}", response_class=HTMLResponse, include_in_schema=False)
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

        held = [request.cookies.get(COOKIE)]

        def who_is_it() -> Identity | None:
            # Looked up afresh at every poll: a stream ends with its session or credential.
            # Each look is the open page's heartbeat (never past the session's ttl), and it
            # follows the session's id as it is replaced.
            session = sessions.touch(held[0])
            if session is not None:
                held[0] = session.sid
            anonymous = Session(sid="", csrf="", started_at=0, issued_at=0, last_seen=0)
            return door.identity(request, session or anonymous)

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
        session = door.visitor(request)
        who = door.identity(request, session)
        return page(request, session, who, "error.html", {"title": e.message}, e.status)

    return error_page
