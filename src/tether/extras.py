"""Which optional extra provides which third-party module, and the error that names it.

tether's core needs six packages; everything that talks to a framework, a server or another
database lives behind an extra (``pyproject.toml``). Without it, an import deep inside the
adapter failed with a bare ``ModuleNotFoundError`` for a module the user never asked for
(``anyio``, ``psycopg_pool``). ``MissingExtra`` (``tether.errors``) says which extra to
install instead: the command line turns it into one line, and library imports of the
adapters raise it (it is an ``ImportError``, so ``except ImportError`` still catches it).
"""

from __future__ import annotations

from tether.errors import MissingExtra

# The top-level module -> the extra that installs it.
PROVIDED_BY = {
    "anyio": "mcp",
    "mcp": "mcp",
    "httpx": "mcp",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "fastapi": "web",
    "starlette": "web",
    "uvicorn": "web",
    "jinja2": "web",
    "multipart": "web",
    "python_multipart": "web",
    "prometheus_client": "web",
    "langgraph": "langgraph",
    "langchain": "langgraph",
    "langchain_core": "langgraph",
    "agents": "openai-agents",
    "openai": "openai",
    "anthropic": "anthropic",
    "pydantic_ai": "pydantic-ai",
    "cedarpy": "cedar",
    "pydantic_monty": "sandbox",
    "temporalio": "temporal",
}


def extra_for(error: ModuleNotFoundError) -> str | None:
    """The extra that installs the module ``error`` found missing, if it is one of ours."""
    top = (error.name or "").split(".", 1)[0]
    return PROVIDED_BY.get(top)


def missing(extra: str, what: str, error: ModuleNotFoundError) -> ImportError:
    """What to raise when importing ``what`` failed with ``error``: ``MissingExtra`` naming
    the extra, unless a module of tether's own is missing (a broken install: kept as is)."""
    if (error.name or "").split(".", 1)[0] == "tether":
        return error
    return MissingExtra(what, extra_for(error) or extra, error.name or "?")
