"""The demo app, ``tether.demo:support``: a scripted support agent over a small ticket service.

The ticket service keeps its own SQLite file (``$TETHER_DEMO_WORLD``, default beside the tether
database) and records every handler invocation in ``calls(seq, operation_key, tool,
arguments_json)``: an independent witness of how many times each side effect really happened.
It also deduplicates by the operation key tether passes, as a well-behaved outside system does,
and can say whether a key was applied (``reconcile``).

The scripted model reads the ticket id from the user's message ("close ticket T-7" reads T-7,
then closes it), and decides from the conversation alone, so a run resumed in another process
carries on exactly where it stopped.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.core.digest import canonical_json
from tether.core.principal import Principal
from tether.gate.settle import Result
from tether.models import Message, ModelToolCall
from tether.policy.rules import Policy
from tether.runs.app import App
from tether.store.base import Store
from tether.tools.registry import Registry, Risk, ToolSpec

WORLD_ENV = "TETHER_DEMO_WORLD"


class TicketWorld:
    """The outside system: tickets, and a witness of every call made to it."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None

    def place_beside(self, store: Store) -> None:
        if os.environ.get(WORLD_ENV):
            self.path = Path(os.environ[WORLD_ENV])
        elif self.path is None:
            db = getattr(store, "path", None)
            self.path = (
                Path(db).with_name(Path(db).stem + "-world.db")
                if isinstance(db, str) and db != ":memory:"
                else Path("tether-world.db")
            )

    def connect(self) -> sqlite3.Connection:
        if self.path is None:
            self.path = Path(os.environ.get(WORLD_ENV) or "tether-world.db")
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS calls (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                operation_key TEXT,
                tool TEXT NOT NULL,
                arguments_json TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS tickets (
                ticket_id TEXT PRIMARY KEY,
                status TEXT NOT NULL
            );
            CREATE TABLE IF NOT EXISTS applied (
                operation_key TEXT PRIMARY KEY,
                result_json TEXT NOT NULL
            );
            """
        )
        return conn

    def invoke(
        self, tool: str, arguments: Mapping[str, Any], operation_key: str | None
    ) -> dict[str, Any]:
        conn = self.connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            # The witness row commits with the change itself: if this process dies first,
            # neither happened.
            conn.execute(
                "INSERT INTO calls (operation_key, tool, arguments_json) VALUES (?, ?, ?)",
                (operation_key, tool, canonical_json(dict(arguments))),
            )
            result = self._apply(conn, tool, arguments, operation_key)
            conn.execute("COMMIT")
            return result
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def _apply(
        self,
        conn: sqlite3.Connection,
        tool: str,
        arguments: Mapping[str, Any],
        operation_key: str | None,
    ) -> dict[str, Any]:
        ticket = str(arguments["ticket_id"])
        conn.execute("INSERT OR IGNORE INTO tickets VALUES (?, 'open')", (ticket,))
        if tool == "read_ticket":
            (status,) = conn.execute(
                "SELECT status FROM tickets WHERE ticket_id = ?", (ticket,)
            ).fetchone()
            return {"ticket_id": ticket, "status": status, "subject": f"Printer on fire ({ticket})"}
        if operation_key is not None:
            done = conn.execute(
                "SELECT result_json FROM applied WHERE operation_key = ?", (operation_key,)
            ).fetchone()
            if done is not None:
                replayed: dict[str, Any] = json.loads(done[0])
                return replayed
        status = "closed" if tool == "close_ticket" else "open"
        conn.execute("UPDATE tickets SET status = ? WHERE ticket_id = ?", (status, ticket))
        result = {"ticket_id": ticket, "status": status}
        if operation_key is not None:
            conn.execute(
                "INSERT INTO applied VALUES (?, ?)", (operation_key, canonical_json(result))
            )
        return result

    def applied(self, operation_key: str) -> dict[str, Any] | None:
        conn = self.connect()
        try:
            row = conn.execute(
                "SELECT result_json FROM applied WHERE operation_key = ?", (operation_key,)
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else dict(json.loads(row[0]))

    def invocations(self, tool: str | None = None) -> int:
        conn = self.connect()
        try:
            if tool is None:
                return int(conn.execute("SELECT count(*) FROM calls").fetchone()[0])
            return int(
                conn.execute("SELECT count(*) FROM calls WHERE tool = ?", (tool,)).fetchone()[0]
            )
        finally:
            conn.close()


_TICKET = re.compile(r"\bT-\d+\b", re.IGNORECASE)


class SupportModel:
    """Reads the ticket named in the user's message, closes it if asked, then reports."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        self.calls += 1
        user = next((m.content for m in messages if m.role == "user"), "")
        found = _TICKET.search(user)
        if found is None:
            return Message(role="assistant", content="Which ticket? Say e.g. 'close ticket T-7'.")
        ticket = found.group(0).upper()
        answers = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
        read_id, close_id = f"read-{ticket}", f"close-{ticket}"
        if read_id not in answers:
            return _call(read_id, "read_ticket", ticket)
        if "close" in user.lower() and close_id not in answers:
            return _call(close_id, "close_ticket", ticket)
        if close_id in answers:
            answer = answers[close_id]
            if '"error"' in answer:
                return Message(role="assistant", content=f"I could not close {ticket}: {answer}")
            return Message(role="assistant", content=f"Closed {ticket}.")
        return Message(role="assistant", content=f"{ticket}: {answers[read_id]}")


def _call(call_id: str, tool: str, ticket: str) -> Message:
    return Message(
        role="assistant",
        tool_calls=(ModelToolCall(id=call_id, name=tool, arguments={"ticket_id": ticket}),),
    )


def build(world: TicketWorld | None = None) -> App:
    world = world or TicketWorld()
    registry = Registry()

    @registry.tool(risk=Risk.READ, required_scope="ticket:read", server_id="support-read")
    def read_ticket(ticket_id: str) -> dict[str, Any]:
        """Read a support ticket."""
        return world.invoke("read_ticket", {"ticket_id": ticket_id}, None)

    def reconcile(operation_key: str) -> Result | None:
        done = world.applied(operation_key)
        return None if done is None else Result(done, external_reference=f"world:{operation_key}")

    @registry.tool(
        risk=Risk.WRITE,
        required_scope="ticket:write",
        version="2",
        server_id="support-write",
        compensation="reopen_ticket",
        reconcile=reconcile,
    )
    def close_ticket(ticket_id: str, operation_key: str) -> Result:
        """Close a support ticket."""
        value = world.invoke("close_ticket", {"ticket_id": ticket_id}, operation_key)
        return Result(value, external_reference=f"world:{operation_key}")

    @registry.tool(
        risk=Risk.WRITE,
        required_scope="ticket:write",
        server_id="support-write",
        reconcile=world.applied,
    )
    def reopen_ticket(ticket_id: str, operation_key: str) -> dict[str, Any]:
        """Reopen a support ticket (undoes close_ticket)."""
        return world.invoke("reopen_ticket", {"ticket_id": ticket_id}, operation_key)

    return App(
        registry=registry,
        policy=Policy(version="policy-3", approvers=frozenset({"reviewer-5"})),
        model=SupportModel,
        principal=Principal(
            subject="user-42", tenant="acme", scopes=frozenset({"ticket:read", "ticket:write"})
        ),
        system="You are a support agent. Close tickets only when asked.",
        on_open=world.place_beside,
    )


# ``--app tether.demo:support``: a fresh app (and world) each time it is loaded.
support = build
