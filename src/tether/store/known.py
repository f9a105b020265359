"""What a SQLite connection knows the file holds because it wrote it (``Known``), and the
schema check that decides whether it may know anything (``schema_code``)."""

from __future__ import annotations

import sqlite3
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
    migrations make, re-parsed first (``SQLiteStore._own_schema``: a schema parsed before
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
