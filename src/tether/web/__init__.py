"""The approval inbox: ``tether serve``'s pages and JSON API (extra ``[web]``).

``service`` holds what both faces do (who sees which approval, deciding through
``tether.gate.desk`` exactly as the command line does) and maps refusals to stable error codes;
``auth`` holds sessions, CSRF tokens, the sign-in limiter and the trusted-proxy header;
``forms`` turns a tool's JSON Schema into an edit form and the form back into arguments;
``app`` assembles the ASGI application. Nothing here is imported by the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.web.app import WebConfig, create_app

__all__ = ["WebConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tether.extras import missing

        try:
            from tether.web import app
        except ModuleNotFoundError as e:
            raise missing("web", f"tether.web.{name}", e) from None
        return getattr(app, name)
    raise AttributeError(f"module 'tether.web' has no attribute {name!r}")
