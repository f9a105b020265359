"""A Pydantic AI agent under tether: its refund waits for an approver's credential, the run
ends deferred, and resuming it (twice, with the same deferred results) refunds once.

Run it with `python examples/pydantic_ai_deferred.py`; offline (Pydantic AI's FunctionModel),
with the store and keys in a temporary directory.
"""

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as m
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests

from tether import Gate, Policy, Principal, Registry, Risk, open_store
from tether.adapters.pydantic_ai import Tether
from tether.identity import add_identity, authenticate

workdir = tempfile.TemporaryDirectory()
tmp = Path(workdir.name)
db = f"sqlite:///{tmp / 'tether.db'}"
witness = tmp / "refunds.log"  # the outside system: one line per refund really made

registry = Registry()


@registry.tool(risk=Risk.WRITE, tenant_path="tenant")
def refund(tenant: str, order_id: str, amount: int, operation_key: str) -> dict[str, Any]:
    """Refund an order."""
    with witness.open("a") as f:
        f.write(f"{operation_key}\n")
    return {"order_id": order_id, "refunded": amount}


def model(messages: list[m.ModelMessage], info: AgentInfo) -> m.ModelResponse:
    """Proposes the refund, then reports what the tool answered."""
    done = [p for msg in messages for p in msg.parts if isinstance(p, m.ToolReturnPart)]
    if not done:
        args = {"order_id": "A-7", "amount": 30}
        return m.ModelResponse(parts=[m.ToolCallPart("refund", args, tool_call_id="call-1")])
    return m.ModelResponse(parts=[m.TextPart(f"Refund: {done[-1].content}")])


def build(store_url: str) -> tuple[Agent[None, str | DeferredToolRequests], Tether]:
    """What each process builds: the gate over the store, and the agent it governs."""
    gate = Gate(
        registry,
        Policy(version="payments-1", approvers=frozenset({"finance-1"})),
        open_store(store_url),
    )
    governed = Tether(gate, Principal(subject="agent-7", tenant="acme"), run_id="order-A-7")
    agent = Agent(
        FunctionModel(model), capabilities=[governed], output_type=[str, DeferredToolRequests]
    )
    return agent, governed


# 1. The model proposes the refund; tether asks, so the run ends deferred. Nothing ran.
agent, governed = build(db)
first = agent.run_sync("refund order A-7")
assert isinstance(first.output, DeferredToolRequests)
pending = first.output.metadata["call-1"]
print(f"deferred: refund waits for {pending['tether_approval_id']}")
history = first.all_messages_json()  # what a client would keep and send back
requests = first.output
governed.gate.store.close()

# 2. An approver, with the credential registered for them, decides in tether.
store = open_store(db)
_, token = add_identity(store, "finance-1", "approver", now=time.time(), tenants=["acme"])
gate = Gate(registry, Policy(version="payments-1", approvers=frozenset({"finance-1"})), store)
decided = gate.approve(pending["tether_approval_id"], authenticate(store, token, "approver"))
print(f"{decided.approval_id}: {decided.status.value} by {decided.approver}")
store.close()

# 3. A fresh process resumes with tether's decisions, then a client resumes the same
#    deferred run again: the ledger replays the refund instead of making it twice.
for attempt in ("resumed", "resumed again"):
    agent, governed = build(db)
    results = governed.results(requests)  # built from tether's grants, not the client's say
    done = agent.run_sync(
        message_history=m.ModelMessagesTypeAdapter.validate_json(history),
        deferred_tool_results=results,
    )
    print(f"{attempt}: {done.output}")
    governed.gate.store.close()

store = open_store(db)
print(store.verify_audit().summary())
store.close()
executions = len(witness.read_text().splitlines())
workdir.cleanup()
print(json.dumps({"executions": executions, "expected": 1, "framework": "pydantic-ai"}))
