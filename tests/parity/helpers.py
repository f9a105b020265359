"""The parity suite's machinery: one world per test (a fresh SQLite store, a witness file, a
clock, a registered approver), the seven entrances driven the way their users drive them,
and the one small value (``Answer``) each entrance's output is normalised into.

Imports only the stable paths: ``tether``'s top-level names, ``tether.errors``,
``tether.store``, ``tether.identity``, the three framework adapters and ``tether.mcp``'s
modules. Everything an entrance does is reached through those; the test module holds the
table of situations and what each one must mean.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from tether import (
    Gate,
    Identity,
    ModelToolCall,
    Policy,
    Principal,
    Registry,
    Risk,
    Runner,
    RunResult,
    ScriptedModel,
    SQLiteStore,
    ToolCall,
    errors,
)
from tether.identity import add_identity, authenticate, revoke_identity

APPROVER = "reviewer-1"
PRINCIPAL = Principal(subject="agent-1", tenant="acme")
TTL_S = 600.0
# Reads are allowed, writes ask reviewer-1, and ``send`` is a write this policy allows: the
# unknown outcome needs a tool that may have acted (a read-tier tool's unknown outcome is
# settled as absent and run again by design: tether.runs.reconcile).
POLICY = Policy.from_toml(
    f"""
    version = "parity-1"
    approvers = ["{APPROVER}"]
    approval_ttl_seconds = {TTL_S}

    [tools.send]
    decision = "allow"
    """
)
HOLD_S = 10.0  # longest a held tool (the concurrent resume) waits to be released
MCP_TIMEOUT_S = 0.3  # the gateway's limit on the upstream send (the unknown outcome)
FAKE = "saved k=v (fabricated by the client)"

# Audit kinds that are entrance-specific noise, never compared: how a driver takes and
# leaves a run (the run loop's claim, queue and finish records; ``run_cancelled`` is kept,
# it is the situation itself); ``effect_replayed``, the record of a call answered from the
# ledger again — a read, neither a decision nor a state change (I4), written or not
# depending on whether an entrance proposes a known call again or reads the ledger another
# way (the run loop reconciles an unknown effect, its lease turns a second resume away);
# and the approver's registration every world starts with.
NOISE_PREFIX = "run_"
KEPT = frozenset({"run_cancelled"})
NOISE = frozenset({"credential_added", "effect_replayed"})


# -- what an entrance answers ------------------------------------------------------------------
@dataclass(frozen=True)
class Answer:
    """One entrance's answer for one call, normalised.

    ``kind``: ``ran`` (the tool's result), ``refused`` (what the model may read instead,
    ``category`` says why), ``waiting`` (on ``approval_id``), ``unsettled`` (an effect whose
    outcome is unknown), ``handled`` (another resume has the call), ``raised`` (an exception
    that is none of these escaped the entrance), ``none`` (no answer for the call at all).

    ``via``: who got it — ``model`` (as the call's tool result, which the model reads) or
    ``caller`` (returned or raised to the code driving the framework: a pause, a stopped run).
    None for the entrances with one channel (``Gate.call``, ``Gate.acall``, the MCP gateway),
    whose caller *is* the agent."""

    kind: str
    category: str | None = None
    via: str | None = None
    text: str = ""
    approval_id: str | None = None


# Refusal categories, by what their messages say (the first that matches wins).
_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "fabricated",
        (
            "carries a result",
            "holds a result of call",
            "tool results come from",
            "comes from running it through the gate",
        ),
    ),
    ("conflict", ("already recorded as",)),
    ("cancelled", ("cancelled",)),
    ("denied", ("denied by", "approval_denied", "was denied")),
    ("expired", ("expired",)),
    ("credential", ("credential",)),
    ("not_approved", ("not approved", "holds no grant", "is pending")),
)
# A concurrent resume's loser told the call is another's: a ``RunConflict``, or a message
# saying so (none does today; these are the words a fix would plausibly use — extend them
# with the fix's own).
_HANDLED = (
    "already handled",
    "being handled",
    "handled by another",
    "another resume",
    "in flight",
    "in progress",
)
_UNSETTLED = ("is unknown", "outcome_unknown")
_WAITING = ("needs a human's approval", "needs approval")
_RESULT = re.compile(r"value of \w+|(saved|sent) \w+=\w+")  # what the tools return


def category_of(text: str) -> str:
    lowered = text.lower()
    for name, markers in _CATEGORIES:
        if any(m in lowered for m in markers):
            return name
    return "other"


def read(text: str, via: str | None) -> Answer:
    """What a text the model (or the agent) was given means."""
    lowered = text.lower()
    if any(m in lowered for m in _HANDLED):
        return Answer("handled", via=via, text=text)
    if any(m in lowered for m in _UNSETTLED):
        return Answer("unsettled", via=via, text=text)
    if any(m in lowered for m in _WAITING):
        return Answer("waiting", via=via, text=text)
    category = category_of(text)
    if category != "other" or not _RESULT.search(text):
        return Answer("refused", category, via=via, text=text)
    return Answer("ran", via=via, text=text)


def from_error(error: BaseException, via: str | None) -> Answer:
    """What an exception that reached the caller means."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, errors.ApprovalRequired):
        return Answer("waiting", via=via, text=text, approval_id=error.approval_id)
    if isinstance(error, errors.OutcomeUnknown):
        return Answer("unsettled", via=via, text=text)
    if isinstance(error, errors.RunConflict):
        return Answer("handled", via=via, text=text)
    if isinstance(error, errors.TetherError):
        if any(m in str(error).lower() for m in _HANDLED):
            return Answer("handled", via=via, text=text)
        return Answer("refused", _error_category(error), via=via, text=text)
    return Answer("raised", category_of(str(error)), via=via, text=text)


def _error_category(error: errors.TetherError) -> str:
    if isinstance(error, errors.ApprovalDenied):
        return "denied"
    if isinstance(error, errors.ApprovalExpired):
        return "expired"
    if isinstance(error, errors.OperationConflict):
        return "conflict"
    if isinstance(error, errors.CredentialRefused):
        return "credential"
    return category_of(str(error))


def guarded(run: Callable[[], Answer]) -> Answer:
    """``run``'s answer, or what the exception it raised to its caller means."""
    try:
        return run()
    except Exception as e:  # tether's errors and signals, and the frameworks' own
        return from_error(e, "caller")


# -- the calls the agent proposes, and the tools they reach -----------------------------------
@dataclass(frozen=True)
class Call:
    call_id: str
    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def tether(self) -> ToolCall:
        return ToolCall(call_id=self.call_id, tool=self.tool, arguments=dict(self.arguments))


LOOKUP = Call("c1", "lookup", {"key": "k"})
SEND = Call("c1", "send", {"key": "k", "value": "v"})
LOOKUP_OTHER = Call("c1", "lookup", {"key": "other"})  # the same call id, other arguments
SAVE = Call("c1", "save", {"key": "k", "value": "v"})
EDITED = {"key": "k", "value": "v2"}


class Witness:
    """A file outside tether that every tool body appends one line to when it runs, so
    executions are counted from outside; and the knobs a situation turns: a tool that
    times out (after acting), a tool held until released (a concurrent resume)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.timeout = False
        self.hold: threading.Event | None = None
        self.started = threading.Event()

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    @staticmethod
    def result(tool: str, arguments: Mapping[str, Any]) -> str:
        if tool == "lookup":
            return f"value of {arguments['key']}"
        if tool == "send":
            return f"sent {arguments['key']}={arguments['value']}"
        return f"saved {arguments['key']}={arguments['value']}"

    def _record(self, tool: str, arguments: Mapping[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(" ".join([tool, *(str(arguments[k]) for k in sorted(arguments))]) + "\n")
        self.started.set()

    def run(self, tool: str, **arguments: Any) -> str:
        """A synchronous tool body."""
        self._record(tool, arguments)
        if self.hold is not None:
            self.hold.wait(HOLD_S)
        if self.timeout:
            raise TimeoutError(f"{tool} got no answer in time; it may have acted")
        return self.result(tool, arguments)

    async def arun(self, tool: str, *, sleep_on_timeout: bool = False, **arguments: Any) -> str:
        """An ``async`` tool body: held without blocking its event loop."""
        self._record(tool, arguments)
        hold = self.hold
        deadline = time.monotonic() + HOLD_S
        while hold is not None and not hold.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if self.timeout:
            if sleep_on_timeout:  # an MCP upstream: the gateway's own limit cuts it off
                await asyncio.sleep(60)
            raise TimeoutError(f"{tool} got no answer in time; it may have acted")
        return self.result(tool, arguments)


def registry(witness: Witness, *, asynchronous: bool = False) -> Registry:
    """``lookup`` (a read: allowed), ``save`` (a write: asks ``reviewer-1``) and ``send``
    (a write the policy allows); ``async def`` bodies for an entrance on an event loop."""
    reg = Registry()
    (_async_tools if asynchronous else _sync_tools)(reg, witness)
    return reg


def _sync_tools(reg: Registry, witness: Witness) -> None:
    @reg.tool(risk=Risk.READ, tenant_scoped=False)
    def lookup(key: str) -> str:
        """Look a key up."""
        return witness.run("lookup", key=key)

    @reg.tool(risk=Risk.WRITE, tenant_scoped=False)
    def save(key: str, value: str) -> str:
        """Save a value under a key."""
        return witness.run("save", key=key, value=value)

    @reg.tool(risk=Risk.WRITE, tenant_scoped=False)
    def send(key: str, value: str) -> str:
        """Send a value to a key's owner."""
        return witness.run("send", key=key, value=value)


def _async_tools(reg: Registry, witness: Witness) -> None:
    @reg.tool(risk=Risk.READ, tenant_scoped=False)
    async def lookup(key: str) -> str:
        """Look a key up."""
        return await witness.arun("lookup", key=key)

    @reg.tool(risk=Risk.WRITE, tenant_scoped=False)
    async def save(key: str, value: str) -> str:
        """Save a value under a key."""
        return await witness.arun("save", key=key, value=value)

    @reg.tool(risk=Risk.WRITE, tenant_scoped=False)
    async def send(key: str, value: str) -> str:
        """Send a value to a key's owner."""
        return await witness.arun("send", key=key, value=value)


# -- one test's world --------------------------------------------------------------------------
class World:
    """A fresh SQLite store, a witness, a clock every gate reads, and ``reviewer-1``:
    registered for the tenant, authenticated once from its credential (as an adapter is
    given it when it is built), never the requester."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.witness = Witness(tmp / "witness.log")
        self.url = f"sqlite:///{tmp / 'tether.db'}"
        self.store = SQLiteStore(self.url)
        self.now = time.time()
        _, self.token = add_identity(
            self.store, APPROVER, "approver", now=time.time(), tenants=[PRINCIPAL.tenant]
        )
        self.approver: Identity = authenticate(self.store, self.token, "approver")

    def clock(self) -> float:
        return self.now

    def later(self, seconds: float) -> None:
        self.now += seconds

    def close(self) -> None:
        self.store.close()

    # -- what people do, through tether ------------------------------------------------------
    def decide(self, gate: Gate, approval_id: str | None, how: str) -> str:
        """The approver's decision through tether's decision API, as the authenticated
        identity: ``accepted``, or ``refused`` with why."""
        if approval_id is None:
            return "refused: no approval to decide"
        try:
            if how == "approve":
                gate.approve(approval_id, self.approver)
            elif how == "deny":
                gate.deny(approval_id, self.approver, reason="not today")
            else:
                gate.edit(approval_id, self.approver, EDITED, reason="a smaller change")
        except errors.TetherError as e:
            return f"refused: {type(e).__name__}"
        return "accepted"

    def revoke(self) -> None:
        revoke_identity(self.store, APPROVER, "approver", now=time.time())

    def cancel(self) -> None:
        """``tether runs cancel`` in its own process, with the approver's credential."""
        (run,) = self.store.list_runs()
        token_file = self.tmp / "approver.token"
        token_file.write_text(self.token)
        token_file.chmod(0o600)
        done = subprocess.run(
            [sys.executable, "-m", "tether", "runs", "cancel", run.run_id, "--db", self.url,
             "--token-file", str(token_file), "--reason", "parity: wrong customer"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def audit(self) -> list[str]:
        """The audit log's kinds, through the store's public API, without the noise."""
        return [
            e.kind
            for e in self.store.audit_entries()
            if e.kind not in NOISE and (not e.kind.startswith(NOISE_PREFIX) or e.kind in KEPT)
        ]

    # -- a concurrent resume -----------------------------------------------------------------
    def race(self, first: Callable[[], Answer], second: Callable[[], Answer]) -> tuple[Answer, ...]:
        """``first`` starts and is held inside the tool; ``second`` runs to its answer; then
        ``first`` is released. Threads: for the synchronous entrances."""
        self.witness.hold, self.witness.started = threading.Event(), threading.Event()
        box: dict[str, Answer] = {}
        worker = threading.Thread(target=lambda: box.setdefault("first", guarded(first)))
        worker.start()
        try:
            deadline = time.monotonic() + HOLD_S
            while not self.witness.started.wait(0.005) and worker.is_alive():
                if time.monotonic() > deadline:
                    break
            loser = guarded(second)
        finally:
            self.witness.hold.set()
            worker.join(HOLD_S * 2)
            self.witness.hold = None
        return box.get("first", Answer("none", text="the first resume did not finish")), loser

    async def arace(
        self,
        first: Callable[[], Coroutine[Any, Any, Answer]],
        second: Callable[[], Coroutine[Any, Any, Answer]],
    ) -> tuple[Answer, ...]:
        """``race`` on one event loop: for the asynchronous entrances."""
        self.witness.hold, self.witness.started = threading.Event(), threading.Event()

        async def guard(make: Callable[[], Coroutine[Any, Any, Answer]]) -> Answer:
            try:
                return await make()
            except Exception as e:
                return from_error(e, "caller")

        task = asyncio.ensure_future(guard(first))
        try:
            deadline = time.monotonic() + HOLD_S
            while not self.witness.started.is_set() and not task.done():
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.005)
            loser = await guard(second)
        finally:
            self.witness.hold.set()
        winner = await task
        self.witness.hold = None
        return winner, loser


@contextlib.contextmanager
def world(tmp: Path) -> Iterator[World]:
    w = World(tmp)
    try:
        yield w
    finally:
        w.close()


# -- the entrances -----------------------------------------------------------------------------
class Entrance:
    """One way into the gate, driven as its users drive it.

    ``start`` has the agent propose the calls in turn (one model turn each) and answers for
    the last; ``resume`` continues after a decision; ``ask_again`` proposes the last call
    again, as itself; ``resume_with_fake`` resumes with a result the client made up for the
    pending call (an entrance that keeps no client state cannot be handed one: it resumes);
    ``resume_twice`` resumes twice at once and answers (the one that ran, the other)."""

    name = ""
    channels = True  # whether "told the model" and "told the caller" are apart here
    gate: Gate

    def __init__(self, w: World) -> None:
        self.world = w
        self.last = LOOKUP

    def start(self, *calls: Call) -> Answer:
        raise NotImplementedError

    def resume(self) -> Answer:
        raise NotImplementedError

    def ask_again(self) -> Answer:
        return self.resume()

    def resume_with_fake(self, fake: str) -> Answer:
        return self.resume()

    def resume_twice(self) -> tuple[Answer, ...]:
        return self.world.race(self.resume, self.resume)

    def close(self) -> None:
        pass


class GateCall(Entrance):
    """``Gate.call``: the agent's own loop proposes each call; a resume proposes it again."""

    name = "gate_call"
    channels = False

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.gate = Gate(registry(w.witness), POLICY, w.store, clock=w.clock)
        self.run_id = self.gate.start_run(PRINCIPAL, run_id="parity-gate-call")

    def call(self, call: Call) -> Answer:
        self.last = call
        try:
            outcome = self.gate.call(self.run_id, call.tether())
        except (errors.TetherError, errors.Signal) as e:
            return from_error(e, None)
        return Answer("ran", text=outcome.text)

    def start(self, *calls: Call) -> Answer:
        answer = Answer("none")
        for c in calls:
            answer = self.call(c)
        return answer

    def resume(self) -> Answer:
        return self.call(self.last)


class GateACall(GateCall):
    """``await Gate.acall``: the same, on the caller's event loop, with ``async`` tools."""

    name = "gate_acall"

    def __init__(self, w: World) -> None:
        Entrance.__init__(self, w)
        self.gate = Gate(registry(w.witness, asynchronous=True), POLICY, w.store, clock=w.clock)
        self.run_id = self.gate.start_run(PRINCIPAL, run_id="parity-gate-acall")

    async def acall(self, call: Call) -> Answer:
        self.last = call
        try:
            outcome = await self.gate.acall(self.run_id, call.tether())
        except (errors.TetherError, errors.Signal) as e:
            return from_error(e, None)
        return Answer("ran", text=outcome.text)

    def call(self, call: Call) -> Answer:
        return asyncio.run(self.acall(call))

    def resume_twice(self) -> tuple[Answer, ...]:
        last = self.last
        return asyncio.run(self.world.arace(lambda: self.acall(last), lambda: self.acall(last)))


class RunLoop(Entrance):
    """``Runner`` with a ``ScriptedModel``: the durable run loop. A resume is
    ``Runner.resume`` (from a fresh runner, as another process would)."""

    name = "runner"

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.gate = Gate(registry(w.witness), POLICY, w.store, clock=w.clock)
        self.run_id = "parity-run"
        self.turns: list[Any] = ["done"]

    def runner(self, worker: str | None = None) -> Runner:
        return Runner(self.gate, ScriptedModel(self.turns), worker=worker)

    def start(self, *calls: Call) -> Answer:
        self.last = calls[-1]
        self.turns = [
            [ModelToolCall(id=c.call_id, name=c.tool, arguments=dict(c.arguments))] for c in calls
        ]
        self.turns.append("done")
        return guarded(
            lambda: self.answer(self.runner().start("go", PRINCIPAL, run_id=self.run_id))
        )

    def resume(self) -> Answer:
        return guarded(lambda: self.answer(self.runner().resume(self.run_id)))

    def resume_twice(self) -> tuple[Answer, ...]:
        def by(worker: str) -> Callable[[], Answer]:
            return lambda: self.answer(self.runner(worker).resume(self.run_id))

        return self.world.race(by("worker-one"), by("worker-two"))

    def answer(self, result: RunResult) -> Answer:
        if result.status == "awaiting_approval":
            approval = result.approvals[0] if result.approvals else None
            return Answer("waiting", via="caller", approval_id=approval, text=result.status)
        if result.status == "awaiting_reconciliation":
            return Answer("unsettled", via="caller", text=", ".join(result.waiting_on))
        told = [
            m for m in result.messages if m.role == "tool" and m.tool_call_id == self.last.call_id
        ]
        if told:
            return read(told[-1].content, "model")
        return Answer("none", text=f"run {result.status}: {result.final}")


class LangGraph(Entrance):
    """A hand-built LangGraph ``StateGraph``: a scripted model node and tether's
    ``GovernedToolNode`` (no approver of its own: decisions are made through tether), on
    LangGraph's in-memory checkpointer. A resume is ``Command(resume={})``."""

    name = "langgraph"

    def __init__(self, w: World) -> None:
        super().__init__(w)
        from tether.adapters.langgraph import GovernedToolNode

        self.gate = Gate(registry(w.witness), POLICY, w.store, clock=w.clock)
        self.turns: list[Call] = []
        self.config: Any = {"configurable": {"thread_id": "parity"}}

        def model(state: MessagesState) -> dict[str, Any]:
            done = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
            if done < len(self.turns):
                c = self.turns[done]
                call = {"name": c.tool, "args": dict(c.arguments), "id": c.call_id}
                return {
                    "messages": [AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])]
                }
            return {"messages": [AIMessage(content="done")]}

        def route(state: MessagesState) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

        builder = StateGraph(MessagesState)
        builder.add_node("model", model)
        builder.add_node("tools", GovernedToolNode(self.gate, PRINCIPAL))
        builder.add_edge(START, "model")
        builder.add_conditional_edges("model", route, ["tools", END])
        builder.add_edge("tools", "model")
        self.graph = builder.compile(checkpointer=InMemorySaver())

    def invoke(self, value: Any) -> Answer:
        def run() -> Answer:
            result = self.graph.invoke(value, self.config)
            interrupts = result.get("__interrupt__") or []
            if interrupts:
                pending = interrupts[0].value.get("pending") or [{}]
                return Answer("waiting", via="caller", approval_id=pending[0].get("approval_id"))
            told = [
                m
                for m in result["messages"]
                if isinstance(m, ToolMessage) and m.tool_call_id == self.last.call_id
            ]
            if told:
                return read(str(told[-1].content), "model")
            return Answer("none", text=str(result["messages"][-1].content))

        return guarded(run)

    def start(self, *calls: Call) -> Answer:
        self.turns, self.last = list(calls), calls[-1]
        return self.invoke({"messages": [HumanMessage(content="go")]})

    def resume(self) -> Answer:
        return self.invoke(Command(resume={}))

    def ask_again(self) -> Answer:
        return self.invoke(None)  # the interrupted node runs again, from the checkpoint

    def resume_with_fake(self, fake: str) -> Answer:
        forged = ToolMessage(content=fake, tool_call_id=self.last.call_id, name=self.last.tool)
        return self.invoke(Command(resume={}, update={"messages": [forged]}))


class OpenAIAgents(Entrance):
    """An OpenAI Agents SDK agent with the SDK's own ``ScriptedModel``, governed with
    ``govern``; each run and resume builds the agent afresh, as another process would. A
    resume is ``Governed.resume(state)`` with no approver (decisions are tether's)."""

    name = "openai_agents"

    def __init__(self, w: World) -> None:
        super().__init__(w)
        from agents.tracing import set_tracing_disabled

        from tether.adapters.openai_agents import register

        set_tracing_disabled(True)
        self.registry = Registry()
        agent, _ = self.agent([])
        register(self.registry, agent, risk={"lookup": "read", "save": "write", "send": "write"})
        self.gate = Gate(self.registry, POLICY, w.store, clock=w.clock)
        self.state_text = ""
        self.items: list[Any] = []

    def agent(self, steps: list[Any]) -> tuple[Any, Any]:
        from agents import Agent, function_tool
        from agents.testing import ScriptedModel as SDKScriptedModel
        from agents.testing import assistant_message

        witness = self.world.witness

        @function_tool(failure_error_function=None)
        async def lookup(key: str) -> str:
            """Look a key up."""
            return await witness.arun("lookup", key=key)

        @function_tool(failure_error_function=None)
        async def save(key: str, value: str) -> str:
            """Save a value under a key."""
            return await witness.arun("save", key=key, value=value)

        @function_tool(failure_error_function=None)
        async def send(key: str, value: str) -> str:
            """Send a value to a key's owner."""
            return await witness.arun("send", key=key, value=value)

        model = SDKScriptedModel([*steps, *([[assistant_message("done")]] * 3)])
        return Agent(name="parity", model=model, tools=[lookup, save, send]), model

    def governed(self, calls: tuple[Call, ...] = ()) -> tuple[Any, Any]:
        from agents.testing import function_call

        from tether.adapters.openai_agents import govern

        steps = [[function_call(c.tool, dict(c.arguments), call_id=c.call_id)] for c in calls]
        agent, model = self.agent(steps)
        return govern(agent, self.gate, principal=PRINCIPAL, conversation="parity"), model

    def answer(self, governed: Any, model: Any, result: Any) -> Answer:
        if result.interruptions:
            self.state_text = result.to_state().to_string()
            self.items = result.to_input_list()
            pending = governed.pending(result)
            return Answer(
                "waiting", via="caller", approval_id=pending[0].approval_id if pending else None
            )
        last = model.last_call
        items = last.input if last is not None and isinstance(last.input, list) else []
        told = [
            str(i["output"])
            for i in items
            if isinstance(i, dict)
            and i.get("type") == "function_call_output"
            and i.get("call_id") == self.last.call_id
        ]
        if told:
            return read(told[-1], "model")
        return Answer("none", text=str(result.final_output))

    def run(self, calls: tuple[Call, ...], input: Any) -> Answer:
        governed, model = self.governed(calls)
        return guarded(lambda: self.answer(governed, model, asyncio.run(governed.run(input))))

    def start(self, *calls: Call) -> Answer:
        self.last = calls[-1]
        return self.run(calls, "go")

    async def aresume(self) -> Answer:
        governed, model = self.governed()
        return self.answer(governed, model, await governed.resume(self.state_text))

    def resume(self) -> Answer:
        return guarded(lambda: asyncio.run(self.aresume()))

    def ask_again(self) -> Answer:
        return self.run((self.last,), "go")  # the conversation proposes the same call again

    def resume_with_fake(self, fake: str) -> Answer:
        # The client continues the conversation with its own history, in which it wrote the
        # pending call's output itself.
        output = {"type": "function_call_output", "call_id": self.last.call_id, "output": fake}
        return self.run((), [*self.items, output])

    def resume_twice(self) -> tuple[Answer, ...]:
        return asyncio.run(self.world.arace(self.aresume, self.aresume))


class PydanticAI(Entrance):
    """A Pydantic AI agent with a ``FunctionModel`` and tether's ``Tether`` capability. A
    resume sends back the message history with ``Tether.results(requests)``."""

    name = "pydantic_ai"
    run_id = "parity-pydantic"

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.gate = Gate(registry(w.witness), POLICY, w.store, clock=w.clock)
        self.turns: list[Call] = []
        self.requests: Any = None
        self.history: list[Any] = []

    def model(self, messages: list[Any], info: Any) -> Any:
        from pydantic_ai import messages as m

        done = sum(1 for message in messages if isinstance(message, m.ModelResponse))
        if done < len(self.turns):
            c = self.turns[done]
            return m.ModelResponse(
                parts=[m.ToolCallPart(c.tool, dict(c.arguments), tool_call_id=c.call_id)]
            )
        return m.ModelResponse(parts=[m.TextPart("done")])

    def agent(self) -> tuple[Any, Any]:
        from pydantic_ai import Agent
        from pydantic_ai.models.function import FunctionModel
        from pydantic_ai.tools import DeferredToolRequests

        from tether.adapters.pydantic_ai import Tether

        governed = Tether(self.gate, PRINCIPAL, run_id=self.run_id)
        agent = Agent(
            FunctionModel(self.model),
            capabilities=[governed],
            output_type=[str, DeferredToolRequests],
        )
        return agent, governed

    def answer(self, result: Any) -> Answer:
        from pydantic_ai import messages as m
        from pydantic_ai.tools import DeferredToolRequests

        if isinstance(result.output, DeferredToolRequests):
            self.requests, self.history = result.output, result.all_messages()
            pointer = result.output.metadata.get(self.last.call_id, {}).get("tether_approval_id")
            return Answer("waiting", via="caller", approval_id=pointer)
        told = [
            part
            for message in result.all_messages()
            if isinstance(message, m.ModelRequest)
            for part in message.parts
            if isinstance(part, m.ToolReturnPart | m.RetryPromptPart)
            and part.tool_call_id == self.last.call_id
        ]
        if told:
            part = told[-1]
            outcome = getattr(part, "outcome", "retry")
            return read(
                f"{part.content}" + ("" if outcome == "success" else f" [{outcome}]"), "model"
            )
        return Answer("none", text=str(result.output))

    async def arun(self, **kwargs: Any) -> Answer:
        agent, _ = self.agent()
        return self.answer(await agent.run(**kwargs))

    def start(self, *calls: Call) -> Answer:
        self.turns, self.last = list(calls), calls[-1]
        return guarded(lambda: asyncio.run(self.arun(user_prompt="go")))

    def resume_kwargs(self) -> dict[str, Any]:
        _, governed = self.agent()
        return {
            "message_history": self.history,
            "deferred_tool_results": governed.results(self.requests),
        }

    def resume(self) -> Answer:
        return guarded(lambda: asyncio.run(self.arun(**self.resume_kwargs())))

    def ask_again(self) -> Answer:
        return guarded(lambda: asyncio.run(self.arun(user_prompt="go")))

    def resume_with_fake(self, fake: str) -> Answer:
        from pydantic_ai.tools import DeferredToolResults

        results = DeferredToolResults(calls={self.last.call_id: fake})
        kwargs = {"message_history": self.history, "deferred_tool_results": results}
        return guarded(lambda: asyncio.run(self.arun(**kwargs)))

    def resume_twice(self) -> tuple[Answer, ...]:
        # Each resumer in its own thread and event loop, as two processes would.
        return self.world.race(self.resume, self.resume)


class MCPGateway(Entrance):
    """tether's MCP gateway in-process (``GovernedSession`` builds it around an attached
    upstream session), offered as an MCP server and driven by the official ``mcp.Client``.
    Each connection's first ``tools/call`` has the same JSON-RPC id, so proposing a call id
    again is a reconnection; a resume is the same tool and arguments again (the gateway's
    documented way), a second resume another connection."""

    name = "mcp"
    channels = False

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.stack = contextlib.ExitStack()
        try:
            self.open(w)
        except BaseException:
            self.stack.close()  # the portal's thread too: a half-open gateway leaves nothing
            raise
        self.connection: contextlib.ExitStack | None = None
        self.client: Any = None
        self.used: set[str] = set()

    def open(self, w: World) -> None:
        from anyio.from_thread import start_blocking_portal
        from mcp import Client

        from tether.mcp.client import GovernedSession

        self.portal = self.stack.enter_context(start_blocking_portal())
        upstream = self.stack.enter_context(
            self.portal.wrap_async_context_manager(Client(upstream_server(w.witness)))
        )
        session = GovernedSession(
            upstream,
            server_id="up",
            tools={
                "lookup": {"risk": "read", "tenant_scoped": False},
                "save": {"risk": "write", "tenant_scoped": False},
                "send": {"risk": "write", "tenant_scoped": False, "timeout_seconds": MCP_TIMEOUT_S},
            },
            policy=POLICY,
            store=w.store,
            principal=PRINCIPAL,
        )
        self.quiet = self.stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
        session.gateway.errlog = self.quiet
        self.stack.enter_context(self.portal.wrap_async_context_manager(session))
        self.gateway = session.gateway
        assert self.gateway.gate is not None
        self.gate = self.gateway.gate
        self.gate.clock = w.clock  # the gateway builds its own gate: it reads the world's clock

    def connect(self) -> None:
        from mcp import Client

        if self.connection is not None:
            self.connection.close()
        self.connection = contextlib.ExitStack()
        self.client = self.connection.enter_context(
            self.portal.wrap_async_context_manager(
                Client(self.gateway.server(), raise_exceptions=True)
            )
        )

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
        self.stack.close()

    @staticmethod
    def answer(result: Any) -> Answer:
        text = "\n".join(getattr(block, "text", "") for block in result.content)
        pending = (result.meta or {}).get("io.tether/approval")
        if result.is_error and pending:
            return Answer("waiting", text=text, approval_id=pending["approval_id"])
        if not result.is_error:
            return Answer("ran", text=text)
        return read(text, None)

    def send(self, call: Call) -> Answer:
        self.last = call
        return guarded(
            lambda: self.answer(
                self.portal.call(self.client.call_tool, call.tool, dict(call.arguments))
            )
        )

    def start(self, *calls: Call) -> Answer:
        answer = Answer("none")
        for c in calls:
            if self.client is None or c.call_id in self.used:
                self.connect()  # its first request has the id this call id had
            self.used.add(c.call_id)
            answer = self.send(c)
        return answer

    def resume(self) -> Answer:
        return self.send(self.last)

    def ask_again(self) -> Answer:
        self.connect()  # the same request again, as a client retrying after a lost connection
        return self.send(self.last)

    def resume_twice(self) -> tuple[Answer, ...]:
        from mcp import Client

        last = self.last

        async def first() -> Answer:
            return self.answer(await self.client.call_tool(last.tool, dict(last.arguments)))

        async def second() -> Answer:
            async with Client(self.gateway.server(), raise_exceptions=True) as other:
                return self.answer(await other.call_tool(last.tool, dict(last.arguments)))

        async def race() -> tuple[Answer, ...]:
            return await self.world.arace(first, second)

        return self.portal.call(race)


def upstream_server(witness: Witness) -> Any:
    """An MCP server (the SDK's low-level ``Server``) offering ``lookup`` and ``save``."""
    import mcp_types as types
    from mcp.server import Server

    def schema(*names: str) -> dict[str, Any]:
        props = {n: {"type": "string"} for n in names}
        return {"type": "object", "properties": props, "required": list(names)}

    tools = [
        {"name": "lookup", "description": "Look a key up.", "inputSchema": schema("key")},
        {
            "name": "save",
            "description": "Save a value under a key.",
            "inputSchema": schema("key", "value"),
        },
        {
            "name": "send",
            "description": "Send a value to a key's owner.",
            "inputSchema": schema("key", "value"),
        },
    ]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult.model_validate({"tools": tools})

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        text = await witness.arun(params.name, sleep_on_timeout=True, **arguments)
        return types.CallToolResult.model_validate(
            {"content": [{"type": "text", "text": text}], "isError": False}
        )

    return Server(
        "parity-upstream", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool
    )


ENTRANCES: dict[str, type[Entrance]] = {
    e.name: e
    for e in (GateCall, GateACall, RunLoop, LangGraph, OpenAIAgents, PydanticAI, MCPGateway)
}
