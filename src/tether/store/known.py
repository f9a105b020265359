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

    "Its own statements" holds only while the file has no trigger or view but tether's: a
    trigger someone planted (one commit, which moves the number once) would otherwise delete
    rows *inside* tether's transactions, which never move it. So a Known is only made after
    the file's triggers and views are found to be exactly the migrations'
    (``SQLiteStore._own_schema``); while they are not, every transaction reads and counts, as
    if nothing were known. Bytes written into the file without SQLite are outside this, as
    they are outside SQLite's own page cache; ``tether audit verify`` reads everything
    afresh."""

    version: int
    head: AuditHead | None = None  # None: not known (a chain with no entry is read too)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, run_id: str, n: int) -> None:
        if len(self.counts) >= KNOWN_RUNS_MAX and run_id not in self.counts:
            self.counts.clear()  # bounded: a run forgotten is counted again, nothing worse
        self.counts[run_id] = n


# How many runs' effect counts a store keeps (a long-lived server touches many runs).
KNOWN_RUNS_MAX = 4096


def schema_code(conn: sqlite3.Connection) -> frozenset[tuple[str, str, str]]:
    """The file's triggers and views, as (type, name, sql): whatever runs inside a write."""
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'view')"
    ).fetchall()
    return frozenset((str(t), str(n), str(q)) for t, n, q in rows)
