"""The OpenAI Agents SDK under tether: every function tool call of an agent passes the gate.

Two steps, a few lines::

    registry = Registry()
    register(registry, agent, risk={"read_file": "read", "write_file": "write"})
    gate = Gate(registry, policy, store)
    governed = govern(agent, gate, principal=principal, conversation="ticket-42")
    result = await governed.run("fix the typo")          # Runner.run, governed
    ...
    result = await governed.resume(state_json, approver=identity)

What it does, and why:

- ``register`` adds each function tool of the agent (and of the agents it calls with
  ``Agent.as_tool`` or hands off to) to a tether ``Registry`` with the SDK's own JSON schema
  and the risk tier you name, so the policy judges them like any other tool.
- ``govern`` replaces, in place, each of those function tools with one whose body calls
  ``gate.call(run_id, ToolCall(call_id=<the SDK's tool call id>, ...))``. The tether run id
  is derived from ``conversation`` (``run_id_for``), so another process resuming the same
  conversation finds the same run, its ledger and its approvals.
- tether's "ask" is the SDK's approval interruption: each tool's ``needs_approval`` asks the
  gate's planner about the call (without running it) and, when it asks, records the approval
  request in tether before the SDK interrupts. ``result.interruptions``, ``RunState.approve``
  / ``reject``, ``to_string`` / ``from_string`` work as the SDK documents.
- A decision in ``RunState`` is only a request. The SDK runs an "approved" tool's body, which
  is the gate: it runs the call only if tether holds a valid, sealed grant bound to that exact
  call (run, call id, tool, arguments), and only once — a state resumed again replays the
  recorded outcome from the ledger. A flipped rejection, edited arguments or an approval
  replayed onto another call get a refusal the model reads, and nothing runs.
- A client "approve" becomes a tether approval only through ``Governed.resume(state,
  approver=identity)`` with an authenticated approver credential (``tether.identity.
  authenticate``); otherwise decisions come from tether itself (``tether approvals
  approve``, ``Gate.approve``), possibly from another process, and the resumed run picks
  them up.
- The user's messages are the run's trusted input for a data-flow policy (``[flow]``): an
  input guardrail on the governed agent (``Governed.input_guardrail``, run before the agent
  starts) records the user-role messages of the input given to ``Runner.run`` /
  ``run_sync`` / ``run_streamed`` (a string, or the text of the user items of a list; not
  system or developer messages, assistant turns or tool output), each once. The SDK runs
  input guardrails on a run's first turn only, so a run resumed from a ``RunState`` does not
  record its input again; ``Governed.resume`` records input staged with
  ``RunState.add_input``. The input of an agent used as a tool is the model's, not the
  user's, and is not recorded.

The SDK is imported only here; ``pip install -e '.[openai-agents]'`` brings it.

The module is long because the SDK's run, its interruptions and its resume each map onto the
gate in their own way, and the three have to be read together to see that no decision is taken
from client state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tether.adapters.inputs import UserInputs
from tether.adapters.openai_tools import ACTIVE, Invocation, agents_and_tools, register
from tether.core.approvals import Approval, ApprovalStatus
from tether.core.budget import Budget
from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import operation_key
from tether.core.principal import Identity, Principal
from tether.errors import (
    AlreadyExists,
    ApprovalStateError,
    ConfigurationError,
    CredentialRefused,
    ResultRefused,
    RunStateError,
    TetherError,
)
from tether.gate.answer import Answer, Refused, Unsettled, Waiting, answer
from tether.gate.pipeline import Gate, ToolCall
from tether.tools.tenancy import fill_tenant

if TYPE_CHECKING:
    from agents import (
        Agent,
        FunctionTool,
        GuardrailFunctionOutput,
        InputGuardrail,
        RunContextWrapper,
        RunResult,
        RunState,
    )
    from agents.items import ToolApprovalItem
    from agents.tool_context import ToolContext

__all__ = ["INPUT_GUARDRAIL", "Governed", "govern", "register", "run_id_for", "user_texts"]

_RUN_PREFIX = "oa-"
INPUT_GUARDRAIL = "tether_user_input"  # the name of the guardrail recording the user's input


def run_id_for(conversation: str) -> str:
    """The tether run of an SDK conversation: ``oa-`` and the first 32 hex digits of the
    SHA-256 of ``conversation``. Deterministic, so every process resuming the conversation
    (give the key you give the SDK's session or ``conversation_id``) finds the same run;
    hashed, so any string is a valid key and two keys never map onto each other by
    accident of spelling."""
    if not isinstance(conversation, str) or not conversation.strip():
        raise ConfigurationError(
            "conversation must be a non-empty string naming the SDK conversation (its "
            "session id, conversation id, or your own ticket id)"
        )
    return _RUN_PREFIX + sha256_hex(conversation)[:32]


def user_texts(input: Any) -> list[str]:
    """The text of the user's messages in an SDK run input: the string itself, or the
    text of each user-role message item of a list (a string content, or its ``input_text``
    parts). System and developer messages, assistant turns, tool calls and their outputs,
    images and files are not the user's words and are left out."""
    if isinstance(input, str):
        return [input] if input else []
    if not isinstance(input, list):
        return []
    texts: list[str] = []
    for raw in input:
        item = raw.model_dump() if hasattr(raw, "model_dump") else raw
        if not isinstance(item, Mapping) or item.get("role") != "user":
            continue
        if item.get("type", "message") != "message":
            continue
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, Mapping) and part.get("type") == "input_text":
                    text = part.get("text")
                    if isinstance(text, str):
                        texts.append(text)
    return [t for t in texts if t]


class Governed:
    """An agent (or a tool list) whose function tools pass ``gate``, in tether run
    ``run_id`` (derived from ``conversation``) acting for ``principal``."""

    def __init__(
        self,
        agent_or_tools: Agent[Any] | Iterable[Any],
        gate: Gate,
        *,
        principal: Principal,
        conversation: str,
        budget: Budget | None = None,
    ) -> None:
        from agents import Agent

        self.gate = gate
        self.principal = principal
        self.conversation = conversation
        self.run_id = run_id_for(conversation)
        root = agent_or_tools if isinstance(agent_or_tools, Agent) else list(agent_or_tools)
        agents, tools = agents_and_tools(root)
        missing = sorted({t.name for t in tools if t.name not in gate.registry})
        if missing:
            raise ConfigurationError(
                f"the gate's registry has no {', '.join(missing)}; call "
                "tether.adapters.openai_agents.register(registry, agent, risk=...) before "
                "building the Gate"
            )
        self._ensure_run(budget)
        self._inputs = UserInputs(gate)
        self.input_guardrail: InputGuardrail[Any] = self._input_guardrail()
        wrapped = {id(t): self._wrap(t) for t in tools}
        # In place: agents used as tools and handoffs hold their agent, so the copies must be
        # what those agents' tool lists hold.
        for agent in agents:
            agent.tools = [wrapped.get(id(t), t) for t in agent.tools]
        self.agent: Agent[Any] | None = root if isinstance(root, Agent) else None
        if self.agent is not None:
            # Only on the agent the user talks to: an agent used as a tool starts a nested
            # run whose input the model wrote. Governed again, the agent keeps one guardrail.
            self.agent.input_guardrails = [
                *(g for g in self.agent.input_guardrails if g.get_name() != INPUT_GUARDRAIL),
                self.input_guardrail,
            ]
        # Every governed tool of the tree; for a tool list, the list with each one replaced.
        self.tools: list[Any] = (
            list(wrapped.values())
            if isinstance(root, Agent)
            else [wrapped.get(id(t), t) for t in root]
        )

    # -- the run ---------------------------------------------------------------------------------
    def _ensure_run(self, budget: Budget | None) -> None:
        with self.gate.store.read() as tx:
            exists = tx.get_run(self.run_id) is not None
        if not exists:
            try:
                self.gate.start_run(self.principal, budget=budget, run_id=self.run_id)
                return
            except AlreadyExists:
                pass  # another process started it first: reuse it, as below
        found = self.gate.run_state(self.run_id).principal
        if found != self.principal:
            # Resuming someone else's conversation must not act with their grants.
            raise RunStateError(
                f"run {self.run_id} (conversation {self.conversation!r}) acts for "
                f"{found.subject} in tenant {found.tenant}, not {self.principal.subject} in "
                f"{self.principal.tenant}; use another conversation key"
            )

    def _input_guardrail(self) -> InputGuardrail[Any]:
        """The input guardrail that records the user's messages of a run's input (see the
        module docstring). It runs before the agent starts (``run_in_parallel=False``), so
        the input is recorded before the model proposes any call; it never trips."""
        from agents import GuardrailFunctionOutput, InputGuardrail

        async def record_user_input(
            _context: RunContextWrapper[Any], _agent: Agent[Any], input: Any
        ) -> GuardrailFunctionOutput:
            added = await asyncio.to_thread(self._inputs.note, self.run_id, user_texts(input))
            return GuardrailFunctionOutput(
                output_info={"tether_inputs_recorded": len(added)}, tripwire_triggered=False
            )

        return InputGuardrail(
            guardrail_function=record_user_input, name=INPUT_GUARDRAIL, run_in_parallel=False
        )

    def _wrap(self, tool: FunctionTool) -> FunctionTool:
        original = getattr(tool.on_invoke_tool, "__tether_original__", tool.on_invoke_tool)
        name, gate, run_id = tool.name, self.gate, self.run_id

        async def needs_approval(
            _context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
        ) -> bool:
            if not _policy_can_ask(gate, name):
                # Nothing could make the policy ask: the tool body's gate call is the one
                # judgement (were it to ask after all, it records the request and refuses).
                return False
            call = ToolCall(call_id=call_id, tool=name, arguments=arguments)
            return await asyncio.to_thread(_request_if_asked, gate, run_id, call)

        async def invoke(context: ToolContext[Any], raw: str) -> Any:
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except ValueError as e:
                return f"tether refused {name}: its arguments are not JSON ({e}); nothing ran"
            if not isinstance(arguments, dict):
                return f"tether refused {name}: its arguments are not a JSON object; nothing ran"
            proposed = ToolCall(call_id=context.tool_call_id, tool=name, arguments=arguments)
            loop = asyncio.get_running_loop()

            def through_gate() -> tuple[Answer, str | None]:
                # One hop to a worker thread for both reads and the call. An approver's edit
                # in tether replaced this call with another (its own call id and grant):
                # what runs is the edited call with tether's arguments, never the ones in
                # the client's state.
                call, note = _as_edited(gate, run_id, proposed)
                manifest = gate.registry.get(name).manifest
                key = operation_key(run_id, call.call_id, name, manifest.version)
                ACTIVE[key] = Invocation(name, original, context, loop)
                try:
                    return answer(lambda: gate.call(run_id, call)), note
                finally:
                    ACTIVE.pop(key, None)

            got, note = await asyncio.to_thread(through_gate)
            if isinstance(got, Waiting):
                # The client's state said "approved" but tether holds no grant for this call.
                return (
                    f"tether refused {name}: this call is not approved in tether "
                    f"({got.signal}); nothing ran"
                )
            if isinstance(got, Refused):
                return f"tether refused {name}: {got.text}"
            if isinstance(got, Unsettled):
                raise got.error  # never guessed: the run stops until the effect is settled
            result = got.outcome.result
            return result if note is None else f"{note}\n{result}"

        invoke.__tether_original__ = original  # type: ignore[attr-defined]
        return dataclasses.replace(tool, on_invoke_tool=invoke, needs_approval=needs_approval)

    async def run(self, input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run(agent, input, **kwargs)`` with the governed agent."""
        from agents import Runner

        check_outputs(self.gate, self.run_id, input)
        return await _unwrapped(Runner.run(self._agent(), input, **kwargs))

    def run_sync(self, input: Any, **kwargs: Any) -> RunResult:
        """``Runner.run_sync(agent, input, **kwargs)`` with the governed agent."""
        from agents import Runner

        check_outputs(self.gate, self.run_id, input)
        try:
            return Runner.run_sync(self._agent(), input, **kwargs)
        except Exception as e:
            raise _tether_cause(e) from e.__cause__

    async def resume(self, state: RunState[Any, Any] | str, **kwargs: Any) -> RunResult:
        """Continue an interrupted run from its ``RunState`` (or ``to_string()`` text).

        Nothing is decided here: decisions are tether's, each made by an approver about one
        approval id (``Governed.approve`` / ``deny``, ``Gate.approve``, ``tether approvals``).
        A call the state marks approved runs only if tether holds its grant, and one whose
        arguments differ from the call tether asked about is refused before anything runs."""
        from agents import Runner, RunState

        if "approver" in kwargs:
            raise ConfigurationError(
                "resume() takes no approver: a decision in a client's RunState is not one an "
                "approver made. Record each decision in tether first — "
                "governed.approve(approval_id, approver) or governed.deny(...) — then resume"
            )
        agent = self._agent()
        loaded = await RunState.from_string(agent, state) if isinstance(state, str) else state
        self._check_every_call_decided(loaded)
        self._check_client_approvals(loaded)
        self._take_tether_decisions(loaded)
        # Input staged with RunState.add_input is the user's next message; the run's
        # opening input was recorded when it started (guardrails do not run on a resume).
        staged = user_texts(loaded.pending_input)
        if staged:
            await asyncio.to_thread(self._inputs.note, self.run_id, staged)
        return await _unwrapped(Runner.run(agent, loaded, **kwargs))

    def _check_client_approvals(self, state: RunState[Any, Any]) -> None:
        """A call the state approves while tether still waits on its approval must be the
        call tether asked about (same tool and arguments): otherwise the resume would close
        that request and ask about another call under the same id. (Once decided, the gate
        checks the grant against the call itself.)"""
        for item in state.get_interruptions():
            if _client_decision(state, item) is not True:
                continue
            approval = self.gate.approval_for(self.run_id, item.call_id or "")
            if approval is not None and approval.status is ApprovalStatus.PENDING:
                self._check_same_call(approval, item)

    def _check_every_call_decided(self, state: RunState[Any, Any]) -> None:
        """A state that decides some pending calls but leaves another one undecided (and
        tether holds no decision for it either) is refused before anything is recorded or
        run, as a batch of decisions with one missing: resuming would run the decided calls
        while the forgotten one waits, out of the order the model proposed them in. (The
        SDK keys each decision by the interrupted item's tool and call id, so decisions by
        position cannot be expressed in a ``RunState`` at all.)"""
        items = state.get_interruptions()
        if not any(_client_decision(state, item) is not None for item in items):
            return  # nothing decided by the client: tether's own decisions are taken
        for item in items:
            if _client_decision(state, item) is not None:
                continue
            approval = self.gate.approval_for(self.run_id, item.call_id or "")
            if approval is None or approval.status in (
                ApprovalStatus.PENDING,
                ApprovalStatus.EXPIRED,
            ):
                which = f" (tether approval {approval.approval_id})" if approval else ""
                raise ApprovalStateError(
                    f"the state decides some pending calls but not {item.call_id} "
                    f"({item.name}){which}: approve or reject every interrupted call "
                    "(RunState.approve / reject), or none and let tether's decisions stand; "
                    "nothing was recorded or run"
                )

    def _take_tether_decisions(self, state: RunState[Any, Any]) -> None:
        """Let the gate answer every call the client left undecided once tether holds more
        than a pending request for it: the SDK keeps an undecided call interrupted and never
        runs its body, so a grant made with `tether approvals approve`, a denial, an expiry
        or a cancelled run would otherwise never be seen. Marking it approved in the SDK
        only lets the body — the gate — run; the gate says what the call's answer is (it
        runs under its grant, or the model reads why not), and audits it."""
        for item in state.get_interruptions():
            if _client_decision(state, item) is not None:
                continue
            approval = self.gate.approval_for(self.run_id, item.call_id or "")
            if approval is not None and approval.status is not ApprovalStatus.PENDING:
                state.approve(item)

    # -- approvals -------------------------------------------------------------------------------
    def pending(self, interrupted: RunResult | RunState[Any, Any]) -> list[Approval]:
        """The tether approvals behind an interrupted run's ``interruptions``, in order:
        their ids are what `tether approvals approve` takes."""
        from agents import RunState

        items = (
            interrupted.get_interruptions()
            if isinstance(interrupted, RunState)
            else interrupted.interruptions
        )
        found: list[Approval] = []
        for item in items:
            approval = self.gate.approval_for(self.run_id, item.call_id or "")
            if approval is not None:
                found.append(approval)
        return found

    def approve(
        self, approval_id: str, approver: Identity, *, reason: str | None = None
    ) -> Approval:
        """Approve one pending call of this run, as ``approver``: an identity authenticated
        from an approver credential (``tether.identity.authenticate``), which tether checks
        again as it records the decision. In a web app, pass the signed-in user's."""
        self._check_decision(approval_id, approver)
        return self.gate.approve(approval_id, approver, reason=reason)

    def deny(self, approval_id: str, approver: Identity, *, reason: str | None = None) -> Approval:
        """Deny one pending call of this run, as ``approver``; the model reads ``reason``."""
        self._check_decision(approval_id, approver)
        return self.gate.deny(approval_id, approver, reason=reason)

    def _check_decision(self, approval_id: str, approver: Identity) -> None:
        if not isinstance(approver, Identity) or approver.credential_id is None:
            raise CredentialRefused(
                "a decision needs an authenticated approver: pass "
                "tether.identity.authenticate(store, token, 'approver')",
                reasons=("no credential",),
            )
        with self.gate.store.read() as tx:
            approval = tx.get_approval(approval_id)
        if approval is None or approval.run_id != self.run_id:
            raise ApprovalStateError(
                f"no approval {approval_id} in run {self.run_id}; decide the approvals "
                "governed.pending(result) lists"
            )

    def _check_same_call(self, approval: Approval, item: ToolApprovalItem) -> None:
        try:
            arguments = json.loads(item.arguments or "{}")
        except ValueError:
            arguments = None
        tool = self.gate.registry.find(approval.tool)
        if isinstance(arguments, dict) and tool is not None and tool.manifest.tenant_parts:
            arguments = fill_tenant(arguments, tool.manifest.tenant_parts, self.principal.tenant)
        same = (
            isinstance(arguments, dict)
            and item.name == approval.tool
            and "sha256:" + sha256_hex(canonical_json(arguments)) == approval.argument_digest
        )
        if not same:
            raise ApprovalStateError(
                f"the state's call {item.call_id} ({item.name}) differs from the call tether "
                f"asked approval {approval.approval_id} for; nothing was approved — decide "
                f"what tether shows: tether approvals show {approval.approval_id}"
            )

    def _agent(self) -> Agent[Any]:
        if self.agent is None:
            raise ConfigurationError(
                "govern() was given a tool list; put governed.tools in your Agent and call "
                "Runner.run yourself"
            )
        return self.agent


def govern(
    agent_or_tools: Agent[Any] | Iterable[Any],
    gate: Gate,
    *,
    principal: Principal,
    conversation: str,
    budget: Budget | None = None,
) -> Governed:
    """Put ``gate`` under every function tool of an agent (in place, nested agents and
    handoffs included) or of a tool list (``Governed.tools``); see the module docstring."""
    return Governed(
        agent_or_tools, gate, principal=principal, conversation=conversation, budget=budget
    )


def check_outputs(gate: Gate, run_id: str, input: Any) -> None:
    """Refuse an input history holding a tool output for a governed call that tether did not
    give: a call that ran must show the value the ledger recorded, and one that did not run
    can only have been answered with tether's refusal. (A pending call has no output yet.)"""
    if not isinstance(input, list):
        return
    items = [i for i in input if isinstance(i, Mapping)]
    names = {i.get("call_id"): i.get("name") for i in items if i.get("type") == "function_call"}
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    if not outputs:
        return
    effects = {e.call_id: e for e in gate.store.list_effects(run_id)}
    for item in outputs:
        call_id, output = item.get("call_id"), str(item.get("output", ""))
        name = names.get(call_id)
        if not isinstance(call_id, str) or name not in gate.registry:
            continue
        effect = effects.get(call_id)
        approval = gate.approval_for(run_id, call_id) if effect is None else None
        if approval is not None and approval.replaced_by is not None:
            # An edited call ran under its replacement's call id; its output answers this one.
            with gate.store.read() as tx:
                edited = tx.get_approval(approval.replaced_by)
            effect = effects.get(edited.call_id) if edited is not None else None
        if effect is not None and effect.status.took_effect and effect.result_json is not None:
            value = json.loads(effect.result_json)
            if output == str(value) or output.endswith(f"\n{value}"):
                continue
        elif output.startswith(f"tether refused {name}:"):
            continue
        raise ResultRefused(
            f"the input holds an output for call {call_id} ('{name}') that tether's ledger "
            f"does not hold in run {run_id}: tool results come from the gate, not from the "
            "client; continue with the items the run returned. Nothing ran"
        )


def _tether_cause(error: Exception) -> Exception:
    """The tether error a tool body raised, if the SDK wrapped it (``UserError("Error
    running tool ...")``): the caller gets tether's own answer — an unsettled effect, a call
    in flight, a cancelled run — not the SDK's wrapper around it."""
    cause = error.__cause__
    return cause if isinstance(cause, TetherError) and not cause.model_reads else error


async def _unwrapped(running: Awaitable[RunResult]) -> RunResult:
    try:
        return await running
    except Exception as e:
        raise _tether_cause(e) from e.__cause__


def _client_decision(state: RunState[Any, Any], item: ToolApprovalItem) -> bool | None:
    """What the client decided in ``state`` for ``item`` (None: nothing). The SDK keeps
    decisions in the state's context, or in the nested state of an agent used as a tool,
    and offers no public reader for either."""
    if item.name is None or item.call_id is None:
        return None
    nested = state._find_nested_approval_state(item)
    owner, owned = nested if nested is not None else (state, item)
    context = owner._context
    if context is None or owned.name is None or owned.call_id is None:
        return None
    return context.is_tool_approved(owned.name, owned.call_id)


def _as_edited(gate: Gate, run_id: str, call: ToolCall) -> tuple[ToolCall, str | None]:
    """``call``, or the call an approver's edit in tether replaced it with (and the note
    that tells the model so)."""
    approval = gate.approval_for(run_id, call.call_id)
    if approval is None or approval.status is not ApprovalStatus.EDITED:
        return call, None
    with gate.store.read() as tx:
        edited = tx.get_approval(approval.replaced_by or "")
    if edited is None:
        raise ApprovalStateError(
            f"approval {approval.approval_id} was edited, but its replacement "
            f"{approval.replaced_by} is missing from the store; nothing ran"
        )
    note = (
        f"[tether: {edited.approver} edited the arguments of this call (approval "
        f"{approval.approval_id} replaced by {edited.approval_id}); it ran as edited]"
    )
    return ToolCall(call_id=edited.call_id, tool=call.tool, arguments=dict(edited.arguments)), note


def _policy_can_ask(gate: Gate, name: str) -> bool:
    """Whether the gate's policy could ask about a call of tool ``name`` (``Policy.can_ask``);
    no policy or an unknown tool is a refusal, never an ask."""
    tool = gate.registry.find(name)
    return gate.policy is not None and tool is not None and gate.policy.can_ask(tool.manifest)


def _request_if_asked(gate: Gate, run_id: str, call: ToolCall) -> bool:
    """Whether the gate would ask for ``call``; if so the request is recorded and nothing
    runs (``Gate.ask_if_needed``)."""
    return gate.ask_if_needed(run_id, call) is not None
