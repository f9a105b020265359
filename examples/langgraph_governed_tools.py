"""A LangGraph graph whose tools pass tether's gate: a model turn proposes a read and a write,
the graph pauses for the write, an approver's credential approves it, the graph resumes, and
resumes again from the same pause (as a second process would): the write ran exactly once.

Run it with `python examples/langgraph_governed_tools.py`; everything lives in a temporary
directory. Needs `pip install -e '.[langgraph]'`.
"""

import itertools
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from tether import Gate, Policy, Principal, Registry, Risk, SQLiteStore
from tether.adapters.langgraph import GovernedToolNode
from tether.identity import add_identity, authenticate

workdir = tempfile.TemporaryDirectory()  # removed at the end
tmp = Path(workdir.name)
deleted: list[str] = []  # the outside system: one entry per file really deleted

registry = Registry()


@registry.tool(risk=Risk.READ)
def read_file(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@registry.tool(risk=Risk.WRITE)
def delete_file(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"


store = SQLiteStore(f"sqlite:///{tmp / 'tether.db'}")
gate = Gate(registry, Policy(version="files-1", approvers=frozenset({"ops-1"})), store)
_, token = add_identity(store, "ops-1", "approver", now=time.time(), tenants=["acme"])
approver = authenticate(store, token, "approver")  # who decides is what the credential proves
principal = Principal(subject="agent-1", tenant="acme")

calls = [
    {"name": "read_file", "args": {"path": "notes.txt"}, "id": "call-read", "type": "tool_call"},
    {"name": "delete_file", "args": {"path": "old.log"}, "id": "call-del", "type": "tool_call"},
]
# An offline model: one turn with both calls, then "Done." as often as it is asked.
model = GenericFakeChatModel(
    messages=itertools.chain(
        [AIMessage("", tool_calls=calls)], itertools.repeat(AIMessage("Done."))
    )
)


def agent(state: MessagesState) -> dict[str, Any]:
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", GovernedToolNode(gate, principal, approver=approver))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
connection = sqlite3.connect(tmp / "checkpoints.db", check_same_thread=False)
graph = builder.compile(checkpointer=SqliteSaver(connection))
config: Any = {"configurable": {"thread_id": "cleanup-1"}}

# 1. The turn's read runs; the write pauses the graph with what exactly is to be approved.
paused = graph.invoke({"messages": [HumanMessage("tidy up")]}, config)
(pending,) = paused["__interrupt__"][0].value["pending"]
print(f"paused: {pending['tool']}({pending['arguments']}) needs {pending['approval_id']}")
pause = graph.get_state(config).config  # the checkpoint a second resumer would load

# 2. The approver decides, keyed by approval id; tether records it as ops-1's credential.
decision = {pending["approval_id"]: {"type": "approve"}}
done = graph.invoke(Command(resume=decision), config)
print(f"resumed: {done['messages'][-1].content} ({len(deleted)} deletion)")

# 3. The same pause resumed again: LangGraph re-runs the tool node from its start, and the
#    gate answers both calls from its ledger instead of running them again.
again = graph.invoke(Command(resume=decision), pause)
replayed = [m.artifact["replayed"] for m in again["messages"] if m.type == "tool"]
print(f"resumed again: tool results replayed={replayed}")
print(store.verify_audit().summary())
connection.close()
store.close()
workdir.cleanup()
print(json.dumps({"executions": len(deleted), "expected": 1, "replayed": replayed}))
