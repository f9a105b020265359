"""Plain SQL on a store's database, as an attacker (or a careless operator) would write it:
a second connection that goes around tether entirely."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from tether.store import Store


class Raw:
    """A second connection to the store's database that goes around tether entirely."""

    def __init__(self, url: str) -> None:
        self.pg = url.startswith("postgresql")
        self.head_table = "audit_heads" if self.pg else "audit_head"
        if self.pg:
            import psycopg

            from tether.store.postgres import split_url

            conninfo, schema = split_url(url)
            self.conn: Any = psycopg.connect(conninfo, autocommit=True)
            self.conn.execute(f'SET search_path TO "{schema}"')
        else:
            self.conn = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)

    def run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cursor = self.conn.execute(sql.replace("?", "%s") if self.pg else sql, params)
        return list(cursor.fetchall()) if cursor.description else []

    def at(self, chain: str, seq: int) -> tuple[str, tuple[Any, ...]]:
        """The WHERE clause naming one entry (SQLite keeps one chain)."""
        return ("chain = ? AND seq = ?", (chain, seq)) if self.pg else ("seq = ?", (seq,))

    def columns(self, table: str) -> list[str]:
        if self.pg:
            rows = self.run(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = ? AND table_schema = current_schema()",
                (table,),
            )
            return [r[0] for r in rows]
        return [r[1] for r in self.run(f"PRAGMA table_info({table})")]

    def wipe_audit(self) -> None:
        """What the acceptance test does: drop the triggers, delete every audit row."""
        if not self.pg:
            for (name,) in self.run("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
                self.run(f'DROP TRIGGER "{name}"')
        self.run("DELETE FROM audit_log")
        self.run(f"DELETE FROM {self.head_table}")

    def close(self) -> None:
        self.conn.close()


@dataclass
class Opened:
    url: str
    store: Store
    raw: Raw
