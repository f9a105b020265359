"""An OpenAI Agents SDK agent under tether: a write pauses as the SDK's own interruption, an
approver's credential decides in tether, and the serialized state resumed twice runs it once.

Run it with `python examples/openai_agents_approval.py` (needs the `[openai-agents]` extra); the
SDK's scripted model stands in for a real one, so nothing leaves the machine.
"""

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from tether import Gate, Policy, Principal, Registry, open_store
from tether.adapters.openai_agents import govern, register
from tether.identity import add_identity, authenticate

set_tracing_disabled(True)  # offline: no trace export
workdir = tempfile.TemporaryDirectory()  # removed at the end
tmp = Path(workdir.name)
written: list[str] = []  # the outside system: one entry per write really made


@function_tool
def save_note(title: str, text: str) -> str:
    """Save a note."""
    written.append(title)
    return f"saved {title!r}"


def build(steps: list[Any]) -> tuple[Agent[Any], Gate]:
    """What each process builds: the agent, its tools in a registry, the gate."""
    model = ScriptedModel(steps)
    agent = Agent(
        name="notes", instructions="Save what you are told.", model=model, tools=[save_note]
    )
    registry = Registry()
    register(registry, agent, risk={"save_note": "write"})  # a write asks by default
    policy = Policy(version="notes-1", approvers=frozenset({"editor-1"}))
    return agent, Gate(registry, policy, open_store(f"sqlite:///{tmp / 'tether.db'}"))


principal = Principal(subject="notes-agent", tenant="acme", scopes=frozenset())
proposal = function_call("save_note", {"title": "plan", "text": "ship Friday"}, call_id="c-1")


async def main() -> None:
    # 1. The model proposes the write; tether asks, so the SDK interrupts. Nothing ran.
    agent, gate = build([[proposal]])
    governed = govern(agent, gate, principal=principal, conversation="ticket-42")
    result = await governed.run("note the plan")
    (approval,) = governed.pending(result)
    print(f"interrupted: {result.interruptions[0].name}, tether approval {approval.approval_id}")
    state = result.to_state()
    state.approve(state.get_interruptions()[0])  # the client's "approve": only a request
    saved = state.to_string()  # what a client keeps between requests

    # 2. The approver authenticates with their credential and approves that approval id
    #    (in a web app: the signed-in user's identity, per decision); then any process resumes.
    _, token = add_identity(gate.store, "editor-1", "approver", now=time.time(), tenants=["acme"])
    who = authenticate(gate.store, token, "approver")
    governed.approve(approval.approval_id, who)
    gate.store.close()  # as if the process ended; a new one resumes
    agent, gate = build([[assistant_message("Saved the plan.")]])
    governed = govern(agent, gate, principal=principal, conversation="ticket-42")
    done = await governed.resume(saved)
    print(f"resumed: {done.final_output} (approved by {who.name}, {who.credential_id})")

    # 3. The same serialized state resumed again: tether replays the recorded outcome.
    gate.store.close()
    agent, gate = build([[assistant_message("Saved the plan.")]])
    governed = govern(agent, gate, principal=principal, conversation="ticket-42")
    again = await governed.resume(saved)
    print(f"resumed again: {again.final_output}; save_note ran {len(written)} time")
    report = gate.store.verify_audit()
    print(report.summary())
    summary = {"executions": len(written), "expected": 1, "run_id": governed.run_id}
    print(json.dumps({**summary, "audit_intact": report.intact}))
    gate.store.close()


asyncio.run(main())
workdir.cleanup()
