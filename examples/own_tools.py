"""Your own tools behind the gate: a read, a write with a cost, a scripted model, a ledger.

Run it with `python examples/own_tools.py`; it works offline and writes only to a
temporary directory.
"""

import tempfile
from pathlib import Path
from typing import Any

from tether import (
    Budget,
    Gate,
    Manifest,
    ModelToolCall,
    Policy,
    Principal,
    Registry,
    Risk,
    Runner,
    ScriptedModel,
    ToolCall,
    Verdict,
    open_store,
)

notes: dict[str, str] = {}  # the "outside system" the agent writes to
writes: list[str] = []  # every time save_note really ran, by operation key
registry = Registry()


# A read: the schema comes from the type hints, the description from the docstring.
@registry.tool(risk=Risk.READ, required_scope="notes:read", tenant_scoped=False)
def read_note(title: str) -> dict[str, Any]:
    """Read a note by its title."""
    return {"title": title, "body": notes.get(title, "")}


# A write, registered with an explicit manifest: its JSON Schema, its risk tier and what
# each call costs against the run's budget. A handler that takes `operation_key` gets the
# call's idempotency key, to hand to the outside system.
def save_note(title: str, body: str, operation_key: str) -> dict[str, Any]:
    writes.append(operation_key)
    notes[title] = body
    return {"title": title, "saved": True}


registry.add(
    Manifest(
        name="save_note",
        description="Save a note under a title.",
        parameters={
            "type": "object",
            "properties": {
                "title": {"type": "string", "maxLength": 80},
                "body": {"type": "string"},
            },
            "required": ["title", "body"],
            "additionalProperties": False,
        },
        risk=Risk.WRITE,
        required_scope="notes:write",
        cost=5,
        tenant_scoped=False,
    ),
    save_note,
)

# Reads and writes run without asking; tiers a policy does not name (admin, ...) are denied.
policy = Policy(version="notes-1", tiers={Risk.READ: Verdict.ALLOW, Risk.WRITE: Verdict.ALLOW})
user = Principal(subject="user-1", tenant="acme", scopes=frozenset({"notes:read", "notes:write"}))
save = ModelToolCall(id="call-2", name="save_note", arguments={"title": "todo", "body": "ship"})
model = ScriptedModel(
    [[ModelToolCall(id="call-1", name="read_note", arguments={"title": "todo"})], [save], "Saved."]
)

with tempfile.TemporaryDirectory() as tmp:
    store = open_store(f"sqlite:///{Path(tmp) / 'tether.db'}")  # its audit key sits beside it
    gate = Gate(registry, policy, store)
    result = Runner(gate, model).start("save my todo", user, budget=Budget(max_cost=20))
    print(f"run {result.run_id}: {result.status} -> {result.final!r}")
    for step in result.steps:
        print(f"  [{step.index}] {step.kind:<10} {step.detail[:64]}")
    print("ledger (one row per call, written before the tool ran):")
    for effect in store.list_effects(result.run_id):
        print(f"  {effect.operation_key}  {effect.status.value}")
    print(f"budget spent: {gate.run_state(result.run_id).budget.spent} of 20")

    # The same call again (a retried request, a replayed conversation): the ledger answers
    # it from the recorded outcome and the tool is not called a second time.
    again = gate.call(
        result.run_id, ToolCall(call_id=save.id, tool=save.name, arguments=save.arguments)
    )
    print(f"replayed: {again.replayed}, result {again.result}")
    print(f"save_note ran {len(writes)}x in the outside system: {len(writes)} effect")
    store.close()
