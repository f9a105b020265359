"""One process resuming an OpenAI Agents SDK run under tether (tests/adapters/
test_openai_agents.py starts two at once): waits at a barrier file for its sibling, then
resumes the approved pause from the serialized ``RunState``; the write appends a line to a
witness file each time its body really runs. Prints, as its last line, a JSON object with
what the model was told for each call and the run's final output.

    python openai_agents_resumer.py DB_URL STATE_FILE BARRIER_DIR NAME WITNESS_FILE
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message
from agents.tracing import set_tracing_disabled

from tether import Gate, Policy, Principal, Registry
from tether.adapters.openai_agents import govern, register
from tether.errors import CallInFlight, OutcomeUnknown
from tether.store import SQLiteStore

set_tracing_disabled(True)  # offline: no trace export


def main(url: str, state_file: str, barrier: str, name: str, witness: str) -> None:
    # The same tools (names, schemas, docstrings, risk), agent name, policy, principal and
    # conversation as the test's World, so the run, its grant and its ledger are the same.
    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    @function_tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        with open(witness, "a", encoding="utf-8") as f:
            f.write(f"{name} {path} {text}\n")
        time.sleep(0.3)  # long enough for the sibling to arrive while it runs
        return f"wrote {len(text)} bytes to {path}"

    @function_tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        with open(witness, "a", encoding="utf-8") as f:
            f.write(f"{name} delete {path}\n")
        return f"deleted {path}"

    model = ScriptedModel([[assistant_message(f"done {i}")] for i in range(3)])
    agent = Agent(name="writer", model=model, tools=[read_file, write_file, delete_file])
    registry = Registry()
    register(
        registry,
        agent,
        risk={"read_file": "read", "write_file": "write", "delete_file": "irreversible"},
    )
    store = SQLiteStore(url)
    policy = Policy(version="files-1", approvers=frozenset({"alice"}), approval_ttl_s=600)
    governed = govern(
        agent,
        Gate(registry, policy, store),
        principal=Principal(subject="agent-1", tenant="acme", scopes=frozenset()),
        conversation="ticket-1",
    )
    state_text = Path(state_file).read_text(encoding="utf-8")
    Path(barrier, name).touch()
    deadline = time.monotonic() + 30
    while len(list(Path(barrier).iterdir())) < 2:
        if time.monotonic() > deadline:
            raise SystemExit("the sibling resumer never arrived")
        time.sleep(0.005)
    # No approver: the grant is tether's, made before either process started.
    try:
        finished = asyncio.run(governed.resume(state_text))
    except (OutcomeUnknown, CallInFlight) as e:
        # The sibling has the call: this resume stops, as tether's own runs do, rather than
        # telling its model anything about a call whose outcome is not recorded yet.
        store.close()
        print(json.dumps({"told": {}, "stopped": type(e).__name__}, sort_keys=True))
        return
    last = model.last_call
    items = last.input if last is not None and isinstance(last.input, list) else []
    told = {
        str(item["call_id"]): str(item["output"])
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    store.close()
    print(json.dumps({"told": told, "final": finished.final_output}, sort_keys=True))


if __name__ == "__main__":
    main(*sys.argv[1:6])
