"""The inbox's door: who a page request comes from (a signed-in session, a visitor, a
trusted proxy's header), how a page is rendered for them with their cookie, and the sign-in
and sign-out routes.

A link from Slack or mail is a cross-site navigation, so the browser leaves the SameSite=Strict
session cookie out of it: the approver looks signed out although they are not. Such a request
is answered with the sign-in form and a same-origin refresh of the very URL, which does carry
the cookie; nothing about the session is touched, so a signed-in approver lands on the
approval, and one who is not signs in from the form and lands there too (the target kept as
a validated path of this inbox, never a URL)."""

# No ``from __future__ import annotations``, as in ``api``: FastAPI reads the annotations.
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from tether.core.principal import Identity
from tether.errors import CredentialRefused
from tether.gate.links import link_is_sound
from tether.identity import authenticate
from tether.web.auth import (
    COOKIE,
    VISITOR_COOKIE,
    Session,
    credential_key,
    csrf_ok,
    identity_by_name,
    identity_for,
)
from tether.web.context import Site, client_key, https_site, peer_of
from tether.web.triage import safe_next

Handler = Callable[[Session, Identity], Response]
_APPROVAL_PATH = re.compile(r"/approvals/([A-Za-z0-9_.~\-]{1,200})")
FormHandler = Callable[[Session, Identity, Mapping[str, str]], Response]


@dataclass
class Door:
    site: Site

    def visitor(self, request: Request) -> Session:
        """The signed-in session the request's cookie names, else a visitor's."""
        sessions = self.site.sessions
        found = sessions.current(request.cookies.get(COOKIE))
        return found or sessions.visitor(request.cookies.get(VISITOR_COOKIE))

    def identity(self, request: Request, session: Session) -> Identity | None:
        config, store = self.site.config, self.site.store
        proxy = config.proxy
        if proxy is not None and proxy.header and proxy.trusts(peer_of(request)):
            name = request.headers.get(proxy.header)
            if name:
                return identity_by_name(store, name.strip(), "proxy")
        if session.credential_id is None:
            return None
        return identity_for(store, session.credential_id, "web")

    def set_cookie(self, request: Request, response: Response, session: Session) -> None:
        config = self.site.config
        secure = config.secure_cookies or request.url.scheme == "https" or https_site(config)
        if session.sid:
            value, name = session.sid, COOKIE
        elif session.fresh:
            value, name = session.nonce, VISITOR_COOKIE
        else:
            return
        response.set_cookie(
            name,
            value,
            max_age=int(config.session_ttl_s),
            httponly=True,
            samesite="strict",
            secure=secure,
            path="/",
        )

    def page(
        self,
        request: Request,
        session: Session,
        who: Identity | None,
        template: str,
        context: dict[str, Any],
        status: int = 200,
    ) -> HTMLResponse:
        sessions = self.site.sessions
        ends = session.started_at + sessions.ttl_s if session.sid else None
        context = {
            "who": who,
            "csrf": session.csrf,
            "notice": None,
            "error": None,
            "session_ends": ends,
            "idle_s": sessions.idle_s,
            **context,
        }
        html = self.site.templates.get_template(template).render(context)
        response = HTMLResponse(html, status, headers={"Cache-Control": "no-store"})
        self.set_cookie(request, response, session)
        return response

    def redirect(self, request: Request, session: Session, to: str) -> Response:
        response = RedirectResponse(to, status_code=303)
        self.set_cookie(request, response, session)
        return response

    def signin_page(
        self,
        request: Request,
        session: Session,
        status: int = 200,
        error: str | None = None,
        target: str | None = None,
    ) -> HTMLResponse:
        if target is None:
            here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            target = safe_next(here)
        # A link followed from another site came without the Strict cookie: look again from
        # this origin, which sends it (a signed-in approver then never sees this form).
        cross = request.headers.get("sec-fetch-site") in ("cross-site", "same-site")
        refresh = (
            target if cross and COOKIE not in request.cookies and request.method == "GET" else None
        )
        action = "/signin" if target == "/" else f"/signin?next={quote(target, safe='/')}"
        context = {
            "error": error,
            "action": action,
            "next": target,
            "refresh": refresh,
            "sent": self.sent_for(request),
        }
        return self.page(request, session, None, "signin.html", context, status)

    def sent_for(self, request: Request) -> dict[str, Any] | None:
        """What a notification's sealed link says (``tether.gate.links``), for the sign-in
        page: the approval it was made for, or that it is not sound (crafted, or expired)."""
        found = _APPROVAL_PATH.fullmatch(request.url.path)
        value = request.query_params.get("link")
        if found is None or value is None:
            return None
        store, approval_id = self.site.store, found.group(1)
        if not link_is_sound(store.keys, approval_id, value, self.site.config.clock()):
            return {"sound": False}
        with store.read() as tx:
            approval = tx.get_approval(approval_id)
        if approval is None:
            return {"sound": False}
        # No more than the notification itself said.
        return {
            "sound": True,
            "tool": approval.tool,
            "tenant": approval.tenant,
            "requester": approval.actor,
            "expires_at": approval.expires_at,
        }

    async def signed_in(self, request: Request, handler: Handler) -> Response:
        """Run ``handler`` for the signed-in approver, or show the sign-in page."""

        def go() -> Response:
            session = self.visitor(request)
            who = self.identity(request, session)
            if who is None:
                return self.signin_page(request, session)
            return handler(session, who)

        return await run_in_threadpool(go)

    async def posted(self, request: Request, handler: FormHandler) -> Response:
        """A form post: the session's CSRF token first, then the signed-in approver."""
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}

        def go() -> Response:
            session = self.visitor(request)
            if not csrf_ok(session, form.get("csrf")):
                title = "This form has expired or did not come from this inbox; reload the page."
                return self.page(request, session, None, "error.html", {"title": title}, 403)
            who = self.identity(request, session)
            if who is None:
                return self.signin_page(request, session, 401, target="/")
            return handler(session, who, form)

        return await run_in_threadpool(go)


def add_door(api: FastAPI, door: Door) -> None:
    site = door.site
    sessions, limiter, store = site.sessions, site.limiter, site.store

    @api.get("/signin", response_class=HTMLResponse, include_in_schema=False)
    async def signin_page(request: Request) -> Response:
        target = safe_next(request.query_params.get("next"))

        def go() -> Response:
            session = door.visitor(request)
            if door.identity(request, session) is not None:
                return door.redirect(request, session, target)
            return door.signin_page(request, session, target=target)

        return await run_in_threadpool(go)

    @api.post("/signin", include_in_schema=False)
    async def signin(request: Request) -> Response:
        form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
        target = safe_next(form.get("next") or request.query_params.get("next"))

        def go() -> Response:
            current = sessions.current(request.cookies.get(COOKIE))
            visitor = sessions.visitor(request.cookies.get(VISITOR_COOKIE))
            shown = current or visitor
            # The form may have been rendered for the visitor while a session was held (a
            # link from another site): either token is this browser's own.
            if not (
                csrf_ok(visitor, form.get("csrf"))
                or (current is not None and csrf_ok(current, form.get("csrf")))
            ):
                error = "The sign-in form expired; try again."
                return door.signin_page(request, shown, 403, error, target)
            token = form.get("token", "")
            keys = [client_key(site, request), credential_key(token)]
            try:
                who = authenticate(store, token, "approver")
            except CredentialRefused:
                wait = limiter.locked(keys)
                if wait is not None:
                    error = f"Too many refused credentials; try again in {wait:.0f} seconds."
                    response = door.signin_page(request, shown, 429, error, target)
                    response.headers["Retry-After"] = f"{wait:.0f}"
                    return response
                for key in keys:
                    if key is not None:
                        limiter.failed(key)
                error = "That credential was not accepted (unknown, revoked, or not an approver's)."
                return door.signin_page(request, shown, 401, error, target)
            assert who.credential_id is not None
            if current is not None and current.credential_id == who.credential_id:
                return door.redirect(request, current, target)  # already this approver's
            if current is not None:
                sessions.end(current)
            return door.redirect(request, sessions.sign_in(who.credential_id), target)

        return await run_in_threadpool(go)

    @api.post("/signout", include_in_schema=False)
    async def signout(request: Request) -> Response:
        def out(session: Session, who: Identity, form: Mapping[str, str]) -> Response:
            sessions.end(session)
            response = RedirectResponse("/", status_code=303)
            response.delete_cookie(COOKIE, path="/")
            return response

        return await door.posted(request, out)
