"""LangChain 1.x and LangGraph under tether's gate: every tool call an agent makes passes it.

Two ways in, one translation (``Governor``):

- ``GovernedToolNode``, the tool node of a hand-built ``StateGraph``;
- ``TetherMiddleware``, for ``langchain.agents.create_agent``: the governed replacement for
  ``HumanInTheLoopMiddleware``.

A LangGraph thread is a tether run (``run_id_for(thread_id)``), and each tool call is judged
with the model's own tool call id as its call id. That identity survives LangGraph's own
replays: LangGraph re-executes an interrupted node from its start when it resumes, so every
call of the node is proposed again, and the gate answers a call that already ran from its
ledger (never running it twice) while a sibling that needed no approval keeps its result.

A call that needs approval pauses the graph with one ``interrupt()`` per node, whose value
lists each pending call (approval id, tool, arguments, digest, reasons, expiry). The graph
resumes with ``Command(resume={approval_id: decision, ...})``, decisions keyed by approval id:
``{"type": "approve"}``, ``{"type": "deny", "message": "..."}`` or ``{"type": "edit",
"arguments": {...}}``. A decision is only a request: it is recorded through tether by the
configured approver's ``Identity``, and the call runs only if tether then holds a grant bound
to that exact call. A decision made outside the graph (``tether approvals approve``, another
process, hours later) is found when the graph resumes, whatever the resume value. A resume
value that cannot be applied (decisions by position, an unknown approval id, a decision
contradicting one already recorded, a pending call left undecided) is refused before anything
runs, and LangGraph keeps the pause open to be answered again.

The run's steps (``tether runs show``) record what happened to each call: tool calls, approvals
required, granted or denied, refusals, unknown outcomes. The run stays ``running`` while the
graph is paused: ``awaiting_approval`` would make tether's own decision commands queue it for
tether's workers, which cannot drive a run whose conversation lives in LangGraph's checkpoints;
the approvals it waits for are listed by ``tether approvals list``.

The module is long because its three faces (the tool node, the agent middleware and the governor
beneath them) share one interrupt-and-resume protocol; apart, that protocol would be written
three times.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, cast

from pydantic import AfterValidator

from tether.extras import missing

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState
    from langchain.tools.tool_node import ToolCallRequest
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        HumanMessage,
        RemoveMessage,
        ToolMessage,
    )
    from langchain_core.messages import ToolCall as LangChainToolCall
    from langchain_core.runnables import RunnableConfig
    from langgraph.config import get_config
    from langgraph.runtime import Runtime
    from langgraph.types import Command, interrupt
except ModuleNotFoundError as e:
    raise missing("langgraph", "tether.adapters.langgraph", e) from None

from tether.adapters.inputs import UserInputs
from tether.adapters.langchain import langchain_tools
from tether.adapters.resume import (
    DECISION_TYPES,
    RESUME_HINT,
    Decision,
    already_recorded,
    parse_decision,
)
from tether.core.approvals import Approval, ApprovalStatus
from tether.core.budget import Budget
from tether.core.principal import Identity, Principal
from tether.core.screening import redact, screen_arguments, scrub, secret_values
from tether.errors import (
    AlreadyExists,
    ApprovalDenied,
    ApprovalStateError,
    ConfigurationError,
    Denied,
    InternalError,
    InvalidArguments,
    StaleState,
    StoreError,
)
from tether.gate.answer import Refused, Unsettled, Waiting, answer
from tether.gate.desk import as_approver, check_identity
from tether.gate.pipeline import Gate, ToolCall
from tether.gate.state import RunState
from tether.identity import live_credential
from tether.policy.rules import decide
from tether.runs import log as run_log
from tether.tools.registry import Registry

__all__ = [
    "DECISION_TYPES",
    "GovernedToolNode",
    "Governor",
    "TetherMiddleware",
    "langchain_tools",
    "run_id_for",
]

RUN_PREFIX = "langgraph-"


# Who decides a resume: a resolver of the graph's config (the signed-in user), an Identity,
# a trusted name, or nobody (decisions made through tether only).
ApproverSource = Identity | str | Callable[[RunnableConfig], Identity | None] | None


def run_id_for(thread_id: str) -> str:
    """The tether run of a LangGraph thread: the same in every process that resumes it."""
    return RUN_PREFIX + thread_id


def thread_of(config: RunnableConfig | Mapping[str, Any] | None) -> str:
    thread = ((config or {}).get("configurable") or {}).get("thread_id")
    if thread is None or str(thread) == "":
        raise ConfigurationError(
            "a governed graph needs a thread: compile it with a checkpointer and invoke it "
            'with config={"configurable": {"thread_id": "..."}}'
        )
    return str(thread)


@dataclass(frozen=True)
class _Proposed:
    call_id: str
    tool: str
    arguments: dict[str, Any]


class Governor:
    """Puts a node's tool calls through the gate and pauses for the ones that must wait.

    ``approver`` is who a resume decision is recorded as: a function of the graph's config
    that returns the deciding user's ``Identity`` (in a multi-user app, the signed-in user
    the server put in ``configurable``: each resume is decided by whoever sends it), an
    ``Identity`` from ``tether.identity.authenticate`` for a one-approver tool, or a name
    for trusted in-process code. The credential is checked again as each decision is
    recorded. Without one a graph resumes only after decisions made through tether."""

    def __init__(
        self,
        gate: Gate,
        principal: Principal,
        *,
        approver: ApproverSource = None,
        budget: Budget | None = None,
    ) -> None:
        self.gate = gate
        self.principal = principal
        self._approver = (
            approver if callable(approver) or approver is None else as_approver(approver)
        )
        self.budget = budget
        self._runs: set[str] = set()
        self._inputs = UserInputs(gate)  # the same once-per-run recording as the other adapters

    # -- runs ---------------------------------------------------------------------------------
    def run_for(self, config: RunnableConfig | Mapping[str, Any] | None) -> str:
        """The thread's tether run, started the first time the thread calls a tool."""
        run_id = run_id_for(thread_of(config))
        if run_id in self._runs:
            return run_id
        if self._load(run_id) is None:
            try:
                self.gate.start_run(self.principal, run_id=run_id, budget=self.budget)
            except AlreadyExists:
                # Another process started it first; it is the same thread, so reuse it.
                if self._load(run_id) is None:
                    raise
        self._runs.add(run_id)
        return run_id

    def _load(self, run_id: str) -> RunState | None:
        with self.gate.store.read() as tx:
            record = tx.get_run(run_id)
        if record is None:
            return None
        state = RunState.load(record)
        if state.principal != self.principal:
            raise ConfigurationError(
                f"run {run_id} acts for {state.principal.subject} ({state.principal.tenant}), "
                f"not {self.principal.subject} ({self.principal.tenant}): a thread keeps the "
                "principal it started with; use another thread id for another principal"
            )
        return state

    def note_user_messages(self, run_id: str, messages: Sequence[AnyMessage]) -> None:
        """Record the thread's human messages as the run's trusted input (once each), so a
        data-flow policy trusts values the user gave and not values tool output gave."""
        self._inputs.note(
            run_id, [text for m in messages if isinstance(m, HumanMessage) for text in _texts(m)]
        )

    # -- one node's calls ---------------------------------------------------------------------
    def answer(self, run_id: str, tool_calls: Sequence[LangChainToolCall]) -> list[ToolMessage]:
        """A ToolMessage for every call, in order; pauses (``interrupt``) while any waits."""
        calls = [_proposed(tc) for tc in tool_calls]
        answers: dict[str, ToolMessage] = {}
        # Each round either answers calls or pauses; a resume decides every pending call, so
        # two rounds suffice unless a resumed call asks anew (a policy changed meanwhile).
        for _ in range(len(calls) + 2):
            current = {c.call_id: self._approvals(run_id, c.call_id) for c in calls}
            pending = [
                latest
                for c in calls
                if c.call_id not in answers
                for latest in current[c.call_id][-1:]
                if latest.status is ApprovalStatus.PENDING
            ]
            if pending:
                known = {a.approval_id: a for chain in current.values() for a in chain}
                decisions = self._pause(run_id, pending, known)
                self._apply(decisions)
            asked = False
            for c in calls:
                if c.call_id in answers:
                    continue
                found = self._call(run_id, c)
                if found is None:
                    asked = True
                else:
                    answers[c.call_id] = found
            if not asked:
                return [answers[c.call_id] for c in calls]
        raise InternalError(
            f"run {run_id}: tool calls kept asking for approval after every decision; this "
            "is a bug, please report it"
        )

    def _approvals(self, run_id: str, call_id: str) -> list[Approval]:
        """The call's latest approval, and the approval an approver's edit replaced it with."""
        found = self.gate.approval_for(run_id, call_id)
        if found is None:
            return []
        chain = [found]
        if found.status is ApprovalStatus.EDITED:
            with self.gate.store.read() as tx:
                edited = tx.get_approval(found.replaced_by or "")
            if edited is None:
                raise StoreError(f"approval {found.approval_id} was edited but its edit is missing")
            chain.append(edited)
        return chain

    def _call(self, run_id: str, proposed: _Proposed) -> ToolMessage | None:
        """The call's answer through the gate, or None while it waits for a decision. The
        gate decides (an edit followed, an expiry refused, a denial's reason); this only
        maps its answer onto a ``ToolMessage``, a pause, or a stopped graph."""
        call = ToolCall(call_id=proposed.call_id, tool=proposed.tool, arguments=proposed.arguments)
        shown = self._shown_call(call)
        chain = self._approvals(run_id, proposed.call_id)
        if chain and chain[-1].status in (ApprovalStatus.APPROVED, ApprovalStatus.USED):
            # Written before the call is made: a process dying mid-call keeps the grant's step.
            granted = chain[-1]
            self._note(
                run_id,
                ("approval_granted", f"{shown} by {granted.approver} ({granted.approval_id})"),
            )
        got = answer(lambda: self.gate.call(run_id, call))
        if isinstance(got, Waiting):
            self._note(run_id, ("approval_required", f"{shown}: {got.approval_id}"))
            return None
        if isinstance(got, Refused):
            kind = "approval_denied" if isinstance(got.error, ApprovalDenied) else "tool_error"
            self._note(run_id, (kind, f"{shown}: {self._scrub(call, got.text)}"))
            return _error(proposed, got.text)
        if isinstance(got, Unsettled):
            # Never guessed: the graph stops until the effect is settled
            # (`tether effects resolve`), then a resume replays what was decided.
            self._note(run_id, ("outcome_unknown", f"{shown}: {got.error}"))
            raise got.error
        outcome = got.outcome
        result = self._scrub(call, outcome.text)
        self._note(run_id, ("tool_call", f"{shown} -> {result} [{outcome.operation_key}]"))
        return ToolMessage(
            content=outcome.text,
            tool_call_id=proposed.call_id,
            name=proposed.tool,
            artifact={"operation_key": outcome.operation_key, "replayed": outcome.replayed},
        )

    # -- the run's steps ----------------------------------------------------------------------
    def _shown_call(self, call: ToolCall) -> str:
        tool = self.gate.registry.find(call.tool)
        sensitive = () if tool is None else tool.manifest.sensitive_fields
        arguments, _ = redact(dict(call.arguments), sensitive)
        return f"{call.tool}({arguments}) [{call.call_id}]"

    def _scrub(self, call: ToolCall, text: str) -> str:
        # Messages and results may quote a secret argument; steps are shown to anyone.
        tool = self.gate.registry.find(call.tool)
        sensitive = () if tool is None else tool.manifest.sensitive_fields
        return str(redact(scrub(text, secret_values(call.arguments, sensitive)))[0])

    def _note(self, run_id: str, *steps: run_log.StepText) -> None:
        """Append the steps the run does not have yet: LangGraph re-runs a node on resume, and
        two resumers may answer the same pause, so the same step is seen more than once."""
        for _ in range(5):
            try:
                with self.gate.store.transaction() as tx:
                    seen = {(s.kind, s.detail) for s in tx.steps(run_id)}
                    new = [s for s in steps if s not in seen]
                    if new:
                        record = run_log.get_run(tx, run_id)
                        run_log.append(tx, record, now=self.gate.clock(), steps=new)
                return
            except StaleState:
                continue  # the run row moved meanwhile (another call's budget): read again
        raise StoreError(f"run {run_id}: its steps could not be recorded; the run kept changing")

    # -- pausing and resuming -----------------------------------------------------------------
    def _pause(
        self, run_id: str, pending: list[Approval], known: Mapping[str, Approval]
    ) -> list[Decision]:
        """Pause the graph for ``pending``; on resume, the decisions the resume value makes.

        The resume value is checked inside ``interrupt`` (its ``response_schema``): a value
        refused there is not saved, so the same pause can be answered again."""

        def check(value: Any) -> list[Decision]:
            return self._decisions(value, pending, known)

        schema = Annotated[Any, AfterValidator(check)]
        payload = {
            "tether": "approval_required",
            "run_id": run_id,
            "pending": [self._shown(run_id, a) for a in pending],
            "resume": RESUME_HINT,
        }
        return cast(list[Decision], interrupt(payload, response_schema=cast(type, schema)))

    def _shown(self, run_id: str, approval: Approval) -> dict[str, Any]:
        arguments, _ = redact(dict(approval.arguments), approval.sensitive_fields)
        return {
            "approval_id": approval.approval_id,
            "call_id": approval.call_id,
            "tool": approval.tool,
            "arguments": arguments,
            "digest": approval.call_digest,
            "argument_digest": approval.argument_digest,
            "reasons": list(self._reasons(run_id, approval)),
            "expires_at": approval.expires_at,
            "approvers": list(approval.approvers),
        }

    def _reasons(self, run_id: str, approval: Approval) -> tuple[str, ...]:
        if approval.reasons:  # recorded when asked (the data-flow policy's among them)
            return approval.reasons
        tool = self.gate.registry.find(approval.tool)
        principal = self.gate.run_state(run_id).principal
        flags = screen_arguments(approval.arguments)
        manifest = None if tool is None else tool.manifest
        return decide(self.gate.policy, principal, manifest, approval.arguments, flags).reasons

    def _decisions(
        self, value: Any, pending: list[Approval], known: Mapping[str, Approval]
    ) -> list[Decision]:
        """The resume value's decisions, or ValueError saying what is wrong with it."""
        ids = ", ".join(a.approval_id for a in pending)
        if not isinstance(value, Mapping):
            raise ValueError(
                f"the resume value must map approval ids to decisions, not a "
                f"{type(value).__name__} (decisions are never matched by position); pending: "
                f"{ids}; {RESUME_HINT}"
            )
        decisions: list[Decision] = []
        for approval_id, raw in value.items():
            approval = known.get(approval_id) if isinstance(approval_id, str) else None
            if approval is None:
                raise ValueError(
                    f"the resume value names {approval_id!r}, which is not an approval of "
                    f"this pause; pending: {ids}"
                )
            decision = parse_decision(approval_id, raw)
            if approval.status is ApprovalStatus.PENDING:
                self._check_decider(approval)
                decisions.append(decision)
            elif not already_recorded(approval, decision, known):
                raise ValueError(
                    f"approval {approval_id} was already decided ({approval.status.value}"
                    + (f" by {approval.approver}" if approval.approver else "")
                    + f"); the resume value asks to {decision.kind} it, which tether does not "
                    "record: nothing was run"
                )
        missing = [a.approval_id for a in pending if a.approval_id not in value]
        if missing:
            raise ValueError(
                f"the resume value has no decision for {', '.join(missing)}; every pending "
                f"approval needs one (pending: {ids}); {RESUME_HINT}"
            )
        return decisions

    def _decider(self) -> Identity | None:
        """Who decides this resume: the resolver's answer for the graph's config, or the
        approver the node was built with."""
        source = self._approver
        if callable(source):
            found = source(get_config())
            return None if found is None else as_approver(found)
        return source

    def _check_decider(self, approval: Approval) -> None:
        who = self._decider()
        if who is None:
            raise ValueError(
                f"this graph has no approver, so it cannot record a decision on "
                f"{approval.approval_id}: decide it with `tether approvals approve "
                f"{approval.approval_id}` (or deny) and resume with any value, or give the "
                "node an approver Identity"
            )
        policy = self.gate.policy
        authorized = (
            policy.approvers_for(approval.tool) if policy else frozenset(approval.approvers)
        )
        try:
            if who.credential_id is not None:  # as it stands now, not as it was signed in
                with self.gate.store.read() as tx:
                    live_credential(tx, who.credential_id, who.name, "approver")
            check_identity(approval, who, authorized, self.gate.clock())
        except Denied as e:
            raise ValueError(f"{e} (approval {approval.approval_id})") from None

    def _apply(self, decisions: list[Decision]) -> None:
        """Record each decision through tether; an edit the policy refuses becomes a denial."""
        who = self._decider()
        for d in decisions:
            assert who is not None  # checked with the resume value
            try:
                if d.kind == "approve":
                    self.gate.approve(d.approval_id, who)
                elif d.kind == "deny":
                    self.gate.deny(d.approval_id, who, reason=d.message)
                else:
                    assert d.arguments is not None
                    try:
                        self.gate.edit(d.approval_id, who, d.arguments, reason=d.message)
                    except (Denied, InvalidArguments) as e:
                        # The approver did not want the original call; the edit cannot run.
                        self.gate.deny(d.approval_id, who, reason=f"edit refused: {e}")
            except ApprovalStateError:
                # Decided meanwhile by someone else (another resumer, the command line):
                # the gate finds whatever was recorded.
                continue


def _proposed(tc: LangChainToolCall) -> _Proposed:
    call_id = tc.get("id")
    if not call_id:
        raise InvalidArguments(
            tc.get("name", "?"),
            ["a tool call without an id cannot be governed: its id is the call's identity"],
        )
    return _Proposed(call_id=call_id, tool=tc["name"], arguments=dict(tc.get("args") or {}))


def _error(proposed: _Proposed, message: str) -> ToolMessage:
    return ToolMessage(
        content=message, tool_call_id=proposed.call_id, name=proposed.tool, status="error"
    )


class GovernedToolNode:
    """The tool node of a hand-built ``StateGraph``: answers the last AIMessage's tool calls
    through the gate, and pauses with ``interrupt()`` while any waits for a decision.

        builder.add_node("tools", GovernedToolNode(gate, principal, approver=identity))
    """

    def __init__(
        self,
        gate: Gate,
        principal: Principal,
        *,
        approver: ApproverSource = None,
        budget: Budget | None = None,
        messages_key: str = "messages",
    ) -> None:
        self.governor = Governor(gate, principal, approver=approver, budget=budget)
        self.messages_key = messages_key

    def __call__(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        # Any graph state with a messages list: a TypedDict, MessagesState, a dict.
        messages = state.get(self.messages_key) if isinstance(state, Mapping) else None
        if messages is None:
            messages = getattr(state, self.messages_key, None) or []
        message, open_calls, forged = _open_calls(messages, self.governor.gate.registry)
        if message is None or not open_calls:
            return {self.messages_key: forged}
        run_id = self.governor.run_for(config)
        self.governor.note_user_messages(run_id, messages)
        return {self.messages_key: [*forged, *self.governor.answer(run_id, open_calls)]}


def _texts(message: HumanMessage) -> list[str]:
    """The text of a human message (a string, or the text parts of a list of parts)."""
    content = message.content
    if isinstance(content, str):
        return [content] if content else []
    parts = [p.get("text") if isinstance(p, Mapping) else p for p in content]
    return [p for p in parts if isinstance(p, str) and p]


def _open_calls(
    messages: Sequence[AnyMessage], governed: Registry
) -> tuple[AIMessage | None, list[LangChainToolCall], list[RemoveMessage]]:
    """The last AIMessage, its tool calls that still need an answer, and the removal of any
    ToolMessage that claims to answer a governed call already.

    A governed call's answer comes only from the gate: tether's answers are returned by this
    node (or middleware) and the graph moves on to the model, so a ToolMessage found after
    the AIMessage when it runs was put there by someone else (``Command(update=...)``, a
    client's state) — it is removed, and the call is answered from the ledger or waits, so
    the model never reads a result tether did not record."""
    replies: list[ToolMessage] = []
    for message in reversed(messages):
        if isinstance(message, ToolMessage):
            replies.append(message)
        elif isinstance(message, AIMessage):
            tools = {tc.get("id"): tc["name"] for tc in message.tool_calls}
            answered: set[str] = set()
            forged: list[RemoveMessage] = []
            for reply in replies:
                if tools.get(reply.tool_call_id) in governed:
                    if reply.id is not None:
                        forged.append(RemoveMessage(id=reply.id))
                else:
                    answered.add(reply.tool_call_id)  # a tool tether does not govern
            calls = [tc for tc in message.tool_calls if tc.get("id") not in answered]
            return message, calls, forged
    return None, [], []


class TetherMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """For ``create_agent(model, tools=langchain_tools(registry), middleware=[...])``: each
    model turn's tool calls pass the gate together (one pause for all that wait), and any
    call that still reaches the agent's tool node passes it there."""

    def __init__(
        self,
        gate: Gate,
        principal: Principal,
        *,
        approver: ApproverSource = None,
        budget: Budget | None = None,
    ) -> None:
        super().__init__()
        self.governor = Governor(gate, principal, approver=approver, budget=budget)

    def after_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        # Answered here, the calls leave the agent's tool node nothing to run: its routing
        # sends only calls without a ToolMessage there.
        messages = state["messages"]
        message, open_calls, forged = _open_calls(messages, self.governor.gate.registry)
        if message is None or not open_calls:
            return {"messages": forged} if forged else None
        run_id = self.governor.run_for(get_config())
        self.governor.note_user_messages(run_id, messages)
        return {"messages": [*forged, *self.governor.answer(run_id, open_calls)]}

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        # Never ``handler``: the tool runs as tether's registry has it, through the gate.
        run_id = self.governor.run_for(request.runtime.config)
        (answer,) = self.governor.answer(run_id, [request.tool_call])
        return answer

    # Under ``ainvoke``/``astream`` the agent awaits these instead: the same path, run in a
    # worker thread (with the graph's context, so ``interrupt()`` and the config are seen),
    # so neither a tool nor a store write ever blocks the event loop.
    async def aafter_model(
        self, state: AgentState[Any], runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.after_model, state, runtime)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        run_id = self.governor.run_for(request.runtime.config)
        (answer,) = await asyncio.to_thread(self.governor.answer, run_id, [request.tool_call])
        return answer
