"""One migration runner for both SQL stores; each dialect keeps its own list of migrations.

Position in a list is the schema version (the first migration is version 1): append, never
edit, or stores already at that version would never see the change. A store records each
version it applied in ``schema_migrations``; opening applies the ones it lacks, in order,
inside one transaction the caller holds (and which keeps other migrators out), and refuses a
store newer than this tether.

The lists differ in length, and their numbers do not correspond across dialects: SQLite's
migration 2 (run leases, messages and steps) was written before the PostgreSQL store existed,
and PostgreSQL's migration 1 already had all of it. So SQLite has one more, and from there on
SQLite's version n + 1 is PostgreSQL's n. Neither list can be renumbered to match the other:
existing stores record the numbers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import StoreError

# Runs one statement (params None: none, and a PostgreSQL script may hold several) and
# returns the driver's cursor.
Execute = Callable[[str, "tuple[Any, ...] | None"], Any]


@dataclass(frozen=True)
class Dialect:
    """What the runner needs to know about one database."""

    migrations: Sequence[str]
    mark: str  # the driver's placeholder
    float_type: str  # the column type of ``applied_at``, as the first release created it
    split: Callable[[str], list[str]]  # a migration as the statements to execute, in order

    @property
    def version(self) -> int:
        """The schema version this tether writes."""
        return len(self.migrations)


def schema_version(execute: Execute) -> int:
    row = execute("SELECT coalesce(max(version), 0) FROM schema_migrations", None).fetchone()
    return int(row[0]) if row else 0


def migrate(execute: Execute, dialect: Dialect, where: str) -> int:
    """Apply the migrations the store at ``where`` lacks; the schema version it is now at."""
    execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        f"(version INTEGER PRIMARY KEY, applied_at {dialect.float_type} NOT NULL)",
        None,
    )
    current = schema_version(execute)
    if current > dialect.version:
        raise StoreError(_newer(where, current, dialect))
    record = f"INSERT INTO schema_migrations (version, applied_at) VALUES ({dialect.mark}, " + (
        f"{dialect.mark})"
    )
    for version, script in enumerate(dialect.migrations[current:], start=current + 1):
        for statement in dialect.split(script):
            execute(statement, None)
        execute(record, (version, time.time()))
    return dialect.version


def check_current(current: int, dialect: Dialect, where: str) -> None:
    """Refuse to read a store at another version than this tether's without migrating it
    (a reader migrates nothing)."""
    if current > dialect.version:
        raise StoreError(_newer(where, current, dialect))
    if current < dialect.version:
        raise StoreError(
            f"{where} has schema version {current}, older than this tether's "
            f"{dialect.version}; upgrade it with `tether migrate` before reading it read-only"
        )


def _newer(where: str, current: int, dialect: Dialect) -> str:
    return (
        f"{where} has schema version {current}, newer than this tether ({dialect.version}); "
        "upgrade tether"
    )
