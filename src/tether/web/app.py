"""The ASGI application ``tether serve`` runs: the inbox pages (``pages``) and the JSON API
(``api``), both deciding through ``tether.web.service.Inbox``, which decides through
``tether.gate.desk``.

Requests for a host the inbox was not told it is called are refused, and so are form posts
from another origin (``hosts``: DNS rebinding, sibling sites on localhost). Every response
carries a strict Content-Security-Policy: scripts only from this origin (the
one small file in ``static/``), no inline script or style, no framing. Arguments are
attacker-controlled: they reach the page only through Jinja's autoescaping, as text.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from tether.web.api import add_api
from tether.web.context import (
    HERE,
    BodyLimit,
    SecurityHeaders,
    Site,
    WebConfig,
    error_json,
    https_site,
)
from tether.web.hosts import HostGuard
from tether.web.metrics import add_metrics
from tether.web.pages import add_pages
from tether.web.service import WebError
from tether.web.slack import add_slack

__all__ = ["WebConfig", "create_app"]

# The stable codes of what the framework refuses before a route runs (docs/reference.md).
HTTP_CODES = {400: "invalid_json", 404: "not_found", 405: "method_not_allowed"}


def create_app(config: WebConfig) -> FastAPI:
    site = Site(config)
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
    add_api(api, site)
    add_slack(api, site)
    add_metrics(api, site)  # GET /metrics, for a Prometheus scraper (tether.web.metrics)
    error_page = add_pages(api, site)

    def is_api(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    async def on_web_error(request: Request, e: Exception) -> Response:
        assert isinstance(e, WebError)
        if is_api(request):
            return error_json(e)
        return await run_in_threadpool(error_page, request, e)

    async def on_invalid(request: Request, e: Exception) -> Response:
        assert isinstance(e, RequestValidationError)
        if any(err.get("type") == "json_invalid" for err in e.errors()):
            return error_json(WebError(400, "invalid_json", "The body is not valid JSON."))
        problems = [
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}"
            for err in e.errors()
        ]
        return error_json(WebError(422, "invalid_request", "; ".join(problems)[:1000]))

    async def on_http(request: Request, e: Exception) -> Response:
        assert isinstance(e, StarletteHTTPException)
        code = HTTP_CODES.get(e.status_code, "http_error")
        response = await on_web_error(request, WebError(e.status_code, code, str(e.detail)))
        allow = (e.headers or {}).get("Allow")
        if allow:  # a 405 says what the path does take
            response.headers["Allow"] = allow
        return response

    api.add_exception_handler(WebError, on_web_error)
    api.add_exception_handler(RequestValidationError, on_invalid)
    api.add_exception_handler(StarletteHTTPException, on_http)
    origins = [config.base_url] if config.base_url else []
    api.add_middleware(BodyLimit, limit=config.max_body_bytes)
    api.add_middleware(HostGuard, hosts=config.allowed_hosts, origins=origins)
    # Added last, so outermost: on HostGuard's refusals too.
    api.add_middleware(SecurityHeaders, hsts=https_site(config))
    return api
