"""One process resuming a Pydantic AI run under tether (tests/adapters/test_pydantic_ai.py
starts two at once): waits at a barrier file for its sibling, then resumes the approved
pause from the message history as JSON; the refund appends a line to a witness file each
time it really runs.

    python pydantic_ai_resumer.py DB_URL HISTORY_FILE BARRIER_DIR NAME WITNESS_FILE
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai import messages as m
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from tether import Gate, Policy, Principal, Registry, Risk, SQLiteStore
from tether.adapters.pydantic_ai import Tether
from tether.errors import CallInFlight, OutcomeUnknown


def main(url: str, history: str, barrier: str, name: str, witness: str) -> None:
    registry = Registry()

    # The same tool (name, schema, risk) as the test's, so tether's grant binds it.
    @registry.tool(risk=Risk.WRITE, tenant_path="tenant")
    def refund(tenant: str, order_id: str, amount: int) -> dict[str, Any]:
        """Refund an order."""
        with open(witness, "a", encoding="utf-8") as f:
            f.write(f"{name} {order_id} {amount}\n")
        time.sleep(0.3)  # long enough for the sibling to arrive while it runs
        return {"order_id": order_id, "refunded": amount}

    def model(messages: list[m.ModelMessage], info: AgentInfo) -> m.ModelResponse:
        last = messages[-1]
        seen = {
            p.tool_call_id: [p.outcome, p.model_response_str()]
            for p in last.parts
            if isinstance(p, m.ToolReturnPart)
        }
        return m.ModelResponse(parts=[m.TextPart(json.dumps(seen, sort_keys=True))])

    store = SQLiteStore(url)
    policy = Policy(version="shop-1", approvers=frozenset({"finance-1"}), approval_ttl_s=600)
    governed = Tether(
        Gate(registry, policy, store), Principal(subject="agent-7", tenant="acme"), run_id="conv-1"
    )
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(model), capabilities=[governed], output_type=[str, DeferredToolRequests]
    )
    messages = m.ModelMessagesTypeAdapter.validate_json(Path(history).read_bytes())
    Path(barrier, name).touch()
    deadline = time.monotonic() + 30
    while len(list(Path(barrier).iterdir())) < 2:
        if time.monotonic() > deadline:
            raise SystemExit("the sibling resumer never arrived")
        time.sleep(0.005)
    results = DeferredToolResults(approvals={"call-r": True})
    try:
        out = agent.run_sync(message_history=messages, deferred_tool_results=results).output
    except (OutcomeUnknown, CallInFlight) as e:
        # The sibling has the call: this resume stops (its model told nothing), as tether's
        # own runs do for a call whose outcome is not recorded yet.
        out = json.dumps({"call-r": ["stopped", type(e).__name__]})
    print(out)
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
