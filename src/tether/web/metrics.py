"""``GET /metrics``: tether's numbers in the Prometheus text format, for a scraper.

Who may read them: a scraper on the same machine (a loopback peer, with no proxy in between:
a request that carries forwarding headers came through one, so it is not taken as local), or
anyone presenting an admin credential as a bearer token (the numbers cover every tenant, so an
approver's credential, which is for some tenants, is not enough). The numbers are read from
the store at each scrape (``tether.telemetry.state``), so they count every process's calls.
"""

from __future__ import annotations

import ipaddress

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from tether.errors import CredentialRefused
from tether.identity import authenticate
from tether.telemetry.exposition import CONTENT_TYPE, exposition
from tether.telemetry.state import read_state, verifications
from tether.web.context import Site, client_key, peer_of
from tether.web.service import WebError

__all__ = ["add_metrics"]

FORWARDING = ("forwarded", "x-forwarded-for", "x-real-ip")


def is_local(request: Request) -> bool:
    """A loopback peer that no proxy forwarded for."""
    if any(request.headers.get(h) for h in FORWARDING):
        return False
    peer = peer_of(request)
    try:
        return peer is not None and ipaddress.ip_address(peer).is_loopback
    except ValueError:
        return False


def add_metrics(api: FastAPI, site: Site) -> None:
    def check(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token:
            client = client_key(site, request)
            if site.limiter.retry_after(client) is not None:
                raise WebError(429, "rate_limited", "too many refused credentials; wait a minute")
            try:
                authenticate(site.store, token.strip(), "admin")
            except CredentialRefused as e:
                site.limiter.failed(client)
                raise WebError(401, "credential_refused", str(e)) from None
            return
        if not is_local(request):
            raise WebError(
                401,
                "credential_missing",
                "metrics are served to loopback scrapers, or with an admin credential as "
                "'Authorization: Bearer ...' (`tether admins add NAME`)",
            )

    def answer(request: Request) -> str:
        check(request)  # reads the store, as the numbers do: in the thread pool
        return exposition(read_state(site.store), verifications())

    @api.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        text = await run_in_threadpool(answer, request)
        return Response(text, media_type=CONTENT_TYPE)
