"""Queue runs and let a worker drive them: `tether run --enqueue` and `tether worker`, in code.

A worker claims queued runs from the store (on PostgreSQL, from as many machines as you
like), drives each under a lease and stops when idle. Run it with
`python examples/worker_queue.py`; the store lives in a temporary directory.
"""

import tempfile
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether import (
    App,
    Message,
    ModelToolCall,
    Policy,
    Principal,
    Registry,
    Risk,
    Verdict,
    Worker,
    open_store,
)
from tether.tools.registry import ToolSpec

closed: Counter[str] = Counter()  # the outside system: how often each ticket was closed
lock = threading.Lock()  # the worker drives runs on several threads
registry = Registry()


@registry.tool(risk=Risk.WRITE, required_scope="ticket:write", tenant_scoped=False)
def close_ticket(ticket_id: str) -> dict[str, Any]:
    """Close a support ticket."""
    with lock:
        closed[ticket_id] += 1
    return {"ticket_id": ticket_id, "status": "closed"}


class CloseModel:
    """A model of our own (anything with `complete`): close the ticket named in the user's
    message, then say so. It decides from the conversation alone, so any worker can resume."""

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        ticket = next(m.content for m in messages if m.role == "user").split()[-1]
        if not any(m.role == "tool" for m in messages):
            call = ModelToolCall(id="close", name="close_ticket", arguments={"ticket_id": ticket})
            return Message(role="assistant", tool_calls=(call,))
        return Message(role="assistant", content=f"Closed {ticket}.")


app = App(
    registry=registry,
    # Closing tickets is routine here: writes run without asking.
    policy=Policy(version="queue-1", tiers={Risk.READ: Verdict.ALLOW, Risk.WRITE: Verdict.ALLOW}),
    model=CloseModel,
    principal=Principal(subject="triage", tenant="acme", scopes=frozenset({"ticket:write"})),
)

with tempfile.TemporaryDirectory() as tmp:
    store = open_store(f"sqlite:///{Path(tmp) / 'tether.db'}")
    tickets = ["T-1", "T-2", "T-3"]
    for ticket in tickets:  # what `tether run --enqueue --app A MESSAGE` does
        app.runner(store).create_queued(f"close ticket {ticket}", app.principal)
    print(f"queued {len(tickets)} runs")

    worker = Worker(app, store, concurrency=2)  # `tether worker --app A --concurrency 2`
    stats = worker.run(exit_when_idle_s=0.5)
    finished = ", ".join(f"{status}={n}" for status, n in sorted(stats.finished.items()))
    print(f"worker finished {stats.claimed} run(s): {finished}")
    for run in store.list_runs():
        print(f"  {run.run_id}: {run.status}")
    once = all(closed[t] == 1 for t in tickets)
    effects = len(store.list_effects())
    print(
        f"each ticket closed {'once' if once else 'MORE THAN ONCE'}: {effects} effects for 3 runs"
    )
    print(store.verify_audit().summary())
    store.close()
