"""What a SQLite connection knows the file holds because it wrote it (``Known``), and when
it may know anything (``Knowledge``: no other writer since, and a schema that is tether's
own, ``schema_code``). The SQLite store is its only user."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from tether.evidence.audit import AuditHead


@dataclass
class Known:
    """What this connection knows the file holds, because it wrote it: the audit chain's head
    and some runs' effect counts, as of ``version`` (``PRAGMA data_version``). SQLite changes
    that number for a connection whenever *another* connection commits to the file, and never
    for its own commits, so while it stands nothing but this connection's own statements has
    touched a row since: re-reading the head, or counting a run's effect rows to see whether
    one was deleted behind tether's back (an O(effects) scan at every call), would only find
    what is already known. Any other writer (a second process, ``sqlite3`` at a shell, an
    edit) moves the number, and the next transaction reads and counts again.

    "Its own statements" holds only while the file's schema is tether's: a trigger someone
    planted, or a table rebuilt with ``ON CONFLICT REPLACE`` (one commit, which moves the
    number once), would otherwise delete rows *inside* tether's own statements, which never
    move it. So a Known is only made after the file's whole schema — every table, index,
    trigger and view, as ``sqlite_master`` holds it — is found to be exactly what the
    migrations make, re-parsed first (``Knowledge.own_schema``: a schema parsed before
    the text was put back would still run); while it is not (an extra index, a file another
    SQLite version worded differently), every transaction reads and counts, as if nothing
    were known: slower, never less safe. Bytes written into the file without SQLite
    are outside this, as they are outside SQLite's own page cache; ``tether audit verify``
    reads everything afresh."""

    version: int
    head: AuditHead | None = None  # None: not known (a chain with no entry is read too)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, run_id: str, n: int) -> None:
        if len(self.counts) >= KNOWN_RUNS_MAX and run_id not in self.counts:
            self.counts.clear()  # bounded: a run forgotten is counted again, nothing worse
        self.counts[run_id] = n


# How many runs' effect counts a store keeps (a long-lived server touches many runs).
KNOWN_RUNS_MAX = 4096


def schema_code(conn: sqlite3.Connection) -> frozenset[tuple[str, str, str, str]]:
    """The file's schema as (type, name, table, sql), every table, index, trigger and view:
    what decides what a write does besides the write itself. SQLite's own bookkeeping tables
    (``sqlite_stat1`` after ANALYZE, ``sqlite_sequence``) change no row and are left out."""
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE NOT (type = 'table' AND name LIKE 'sqlite\\_%' ESCAPE '\\')"
    ).fetchall()
    return frozenset((str(t), str(n), str(b), str(q)) for t, n, b, q in rows)


class Knowledge:
    """One store's ``Known``, and when it may have one. ``take`` at each write transaction's
    start (under its lock, after ``BEGIN IMMEDIATE``), ``keep`` after its commit; what a
    transaction that fails took is gone. ``expected`` is the schema tether's migrations make."""

    def __init__(self, expected: Callable[[], frozenset[tuple[str, str, str, str]]]) -> None:
        self.expected = expected
        self.known: Known | None = None
        self.last_version: int | None = None  # data_version at the last write's start
        self.foreign_cookie: int | None = None  # the schema_version of a schema found foreign

    def take(self, conn: sqlite3.Connection) -> Known | None:
        known, self.known = self.known, None
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        # Nothing is known after another connection wrote (or before anything is): this
        # transaction reads everything. A new Known starts only once the file has been quiet
        # since this connection's previous write began (a file several processes write would
        # pay the schema check at nearly every transaction and rarely keep what it bought),
        # and only on tether's own schema. A schema found foreign is not checked again until
        # its cookie moves: a cookie put back can only make the store know less.
        quiet, self.last_version = version == self.last_version, version
        if known is not None and known.version == version:
            return known
        if not quiet:
            return None
        cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
        if cookie == self.foreign_cookie or not self.own_schema(conn):
            self.foreign_cookie = cookie
            return None
        return Known(version)

    def keep(self, known: Known | None) -> None:
        self.known = known

    def forget(self) -> None:
        self.known = None

    def own_schema(self, conn: sqlite3.Connection) -> bool:
        """Whether the file's schema is exactly the one tether's migrations make, as the
        connection will run it. The connection re-parses its schema only when the file's
        schema cookie moves, and whoever writes the file can put the cookie back (or edit
        ``sqlite_master`` with ``writable_schema``): a trigger parsed earlier would then still
        run while the text reads clean. ``writable_schema=RESET`` (SQLite 3.40 here; older
        ones, or a refusal, know nothing) makes it parse the text again first."""
        if sqlite3.sqlite_version_info < (3, 40, 0):
            return False
        try:
            conn.execute("PRAGMA writable_schema = RESET")
        except sqlite3.Error:
            return False
        return schema_code(conn) == self.expected()
