"""PostgreSQL for the tests: a fresh schema per test on the server at $TETHER_TEST_PG.

In CI the server must be there (CI=true makes an unreachable server a failure, not a skip);
on a developer's machine without it these tests skip and say how to enable them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
URL = os.environ.get("TETHER_TEST_PG", DEFAULT)


def available() -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        return f"PostgreSQL at {URL} is unreachable: {e}".strip()
    return None


def require() -> None:
    problem = available()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{problem} — CI must run the PostgreSQL tests", pytrace=False)
    pytest.skip(f"{problem}; start PostgreSQL or set TETHER_TEST_PG=postgresql://... to run")


def schema_url() -> Iterator[str]:
    """A URL whose tables live in a new schema, dropped afterwards."""
    require()
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in URL else "?"
    yield f"{URL}{sep}schema={schema}"
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
