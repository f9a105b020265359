"""Pydantic AI under tether's gate (``pip install -e '.[pydantic-ai]'``).

    governed = Tether(gate, principal, run_id=session_id)  # the run your server names
    agent = Agent(model, capabilities=[governed], output_type=[str, DeferredToolRequests])

The agent's tools are the gate's registry (``GovernedToolset``); each call Pydantic AI makes
passes ``gate.call`` under the model's tool call id, so the ledger replays a call that already
ran instead of running it again. tether's "ask" ends the run with ``DeferredToolRequests``
(Pydantic AI's ``ApprovalRequired``, with tether's approval id, call digest and expiry in the
call's metadata); an approver decides in tether (``gate.approve`` with an authenticated
``Identity``, or ``tether approvals approve``); ``Tether.results`` turns tether's decisions into
the ``DeferredToolResults`` to resume with.

What the client sends back is a request, never a decision: a ``ToolApproved`` runs a call only
if tether holds the grant for that exact call, a result the client supplies for a governed tool
is refused, and tool results in the message history must be the ones tether's ledger recorded
(same call id, same result). Those checks run before any tool of the resumed run does.

An approver's edit in tether (``Gate.edit``, ``tether approvals edit``) is Pydantic AI's
``ToolApproved(override_args=...)``: the resumed call runs as the edited call (its own call id
and grant, tether's arguments, once); the model gets its result under its own call id.

The user's prompts are the run's trusted input for a data-flow policy (``[flow]``): before it
judges a call, the toolset records the prompt the run was given (``RunContext.prompt``) and
the user prompts of the earlier requests in its message history (``UserPromptPart``, text
only), each once however often a history is resumed. A request that holds anything besides
system and user prompts (tool returns, retries) is left out: Pydantic AI puts a tool's
``ToolReturn.content`` there as a ``UserPromptPart``, and tool output is not the user's.

The run is a tether run, and the application names it (``run_id``: its own conversation or
session id, or a function of the run's deps that returns it), never Pydantic AI's
``conversation_id``, which travels with the client's history: a client that changed it would
otherwise get a fresh run and run its calls again. A resume in another process finds the run
by that name; a run started for another principal is refused. The gate runs synchronously
inside the event loop (a tool's own blocking I/O blocks it too), so parallel calls are
judged one at a time.

The module is long because the toolset, its deferred calls and the results it accepts back are
one protocol with the gate; split, each half would re-check what the other decided.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.errors import AlreadyExists

try:
    from pydantic_ai import CallToolsNode, RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ApprovalRequired, ModelRetry
    from pydantic_ai.exceptions import ToolFailed as FrameworkToolFailed
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextContent,
        ToolReturnPart,
        UserContent,
        UserPromptPart,
    )
    from pydantic_ai.tools import (
        DeferredToolRequests,
        DeferredToolResult,
        DeferredToolResults,
        Tool,
        ToolApproved,
        ToolDenied,
    )
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tether.adapters.pydantic_ai needs Pydantic AI: pip install -e '.[pydantic-ai]'"
    ) from e

from tether.adapters.inputs import UserInputs
from tether.core.approvals import Approval, ApprovalStatus
from tether.core.budget import Budget
from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import Effect
from tether.core.principal import Principal
from tether.core.screening import redact
from tether.errors import (
    ApprovalDenied,
    ApprovalExpired,
    ApprovalInvalid,
    ConfigurationError,
    Denied,
    InvalidArguments,
    RunStateError,
    TetherError,
)
from tether.errors import ApprovalRequired as WaitForApproval
from tether.errors import ToolFailed as TetherToolFailed
from tether.gate.answer import Refused, Unsettled, Waiting, answer
from tether.gate.pipeline import Gate, ToolCall
from tether.gate.state import RunState
from tether.tools.registry import Registry
from tether.tools.tenancy import fill_tenant

__all__ = [
    "GovernedToolset",
    "ResumeRefused",
    "Tether",
    "deferred_results",
    "registry_toolset",
    "user_prompts",
]

# The metadata of a call sent back "approved" only so that the gate judges it again (Pydantic
# AI wants a result for every deferred call): a pending one waits again, an expired one is
# asked anew. It claims nothing, so anyone may set it.
ASK_AGAIN = "tether_ask_again"

RunIdSource = str | Callable[[RunContext[Any]], str] | None
PrincipalSource = Principal | Callable[[RunContext[Any]], Principal]
ResumeResult = DeferredToolResult | Literal["skip"]


class ResumeRefused(Denied):
    """What a client sent back to resume a run (deferred tool results, message history)
    disagrees with what tether decided or recorded; nothing of the resumed run ran."""


def run_id_for(ctx: RunContext[Any], run_id: RunIdSource) -> str:
    """The tether run a Pydantic AI run belongs to."""
    if isinstance(run_id, str):
        return run_id
    if run_id is None:
        raise unnamed_run()
    return run_id(ctx)


def unnamed_run() -> ConfigurationError:
    return ConfigurationError(
        "name the tether run: pass run_id= to Tether or GovernedToolset — the conversation "
        "or session id your server keeps (or a function of the run's deps that returns it). "
        "Pydantic AI's conversation_id comes with the client's history, and a client that "
        "changed it would get a new run and run its calls again"
    )


def registry_toolset(registry: Registry) -> FunctionToolset[Any]:
    """The registry's tools as the model is shown them: each manifest's name, description
    and JSON Schema. Their functions are never called: ``GovernedToolset`` sends every call
    to the gate, which runs the registry's handler."""

    def through_the_gate(**_: Any) -> Any:
        raise ConfigurationError(
            "tether's registry tools run only through the gate: wrap this toolset in "
            "GovernedToolset (or use the Tether capability)"
        )

    return FunctionToolset(
        [
            Tool.from_schema(
                through_the_gate,
                name=m.name,
                description=m.description,
                json_schema=dict(m.parameters),
            )
            for m in registry.manifests()
        ]
    )


@dataclass
class GovernedToolset(WrapperToolset[Any]):
    """Every call to a tool of ``wrapped`` passes ``gate.call``; the gate runs the registry's
    handler of the same name (a name the registry lacks is refused, and the model told).
    Build it with ``GovernedToolset.of(gate, principal)`` to show the model the registry's
    own tools."""

    gate: Gate
    principal: PrincipalSource
    run_id: RunIdSource = None
    budget: Budget | None = None
    _started: set[str] = field(default_factory=set, init=False, repr=False)
    _inputs: UserInputs = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.run_id is None:
            raise unnamed_run()
        self._inputs = UserInputs(self.gate)

    @classmethod
    def of(
        cls,
        gate: Gate,
        principal: PrincipalSource,
        *,
        run_id: RunIdSource = None,
        budget: Budget | None = None,
    ) -> GovernedToolset:
        return cls(registry_toolset(gate.registry), gate, principal, run_id, budget)

    async def for_run(self, ctx: RunContext[Any]) -> AbstractToolset[Any]:
        # The history a client sent back is checked before any call of this run is made.
        check_history(self.gate, run_id_for(ctx, self.run_id), ctx.messages)
        return await super().for_run(ctx)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        run_id = run_id_for(ctx, self.run_id)
        call_id = ctx.tool_call_id
        if not call_id:
            raise ConfigurationError(f"Pydantic AI called '{name}' without a tool call id")
        self._ensure_run(ctx, run_id)
        # The user's words are trusted input before this (or any) call is judged.
        self._inputs.note(run_id, user_prompts(ctx.messages, ctx.prompt))
        # ``ctx.tool_call_approved`` is the client's claim, not a grant: the gate decides, and
        # a claim tether does not back is refused rather than quietly waited on. A call sent
        # back to be asked again claims nothing.
        claimed = ctx.tool_call_approved and not asks_again(ctx.tool_call_metadata)
        proposed = ToolCall(call_id=call_id, tool=name, arguments=tool_args)
        # Only a call sent back on resume can have been edited since it was deferred.
        governed = edited_call(self.gate, run_id, proposed) if ctx.tool_call_approved else None
        got = answer(lambda: self.gate.call(run_id, governed or proposed))
        if isinstance(got, Waiting):
            waiting = got.signal
            if claimed:
                raise ResumeRefused(
                    f"call {call_id} ('{name}') is marked approved in DeferredToolResults, but "
                    f"tether holds no grant for it: approval {waiting.approval_id} is pending "
                    f"(an approver decides it: tether approvals approve {waiting.approval_id}); "
                    "nothing ran"
                )
            raise ApprovalRequired(metadata=self._deferral(run_id, call_id, waiting))
        if isinstance(got, Unsettled):
            raise got.error  # never guessed: the run stops until the effect is settled
        if isinstance(got, Refused):
            error = got.error
            if (
                claimed
                and isinstance(error, ApprovalDenied | ApprovalInvalid)
                and not _backed(error)
            ):
                # The client said approved, and tether never granted this call.
                raise ResumeRefused(
                    f"call {call_id} ('{name}') is marked approved in DeferredToolResults, but "
                    f"tether refused it: {error}; nothing ran"
                ) from error
            if isinstance(error, InvalidArguments):
                raise ModelRetry(got.text) from error
            if isinstance(error, TetherToolFailed):
                raise FrameworkToolFailed(got.text) from error
            return ToolDenied(got.text)  # denied, expired, a conflict: the model reads why
        return got.outcome.result

    def _deferral(self, run_id: str, call_id: str, waiting: WaitForApproval) -> dict[str, Any]:
        """What the client is told about a pending approval: pointers, never a decision."""
        approval = self.gate.approval_for(run_id, call_id)
        return {
            "tether_run_id": run_id,
            "tether_approval_id": waiting.approval_id,
            "call_digest": approval.call_digest if approval is not None else None,
            "expires_at": waiting.expires_at,
        }

    def _ensure_run(self, ctx: RunContext[Any], run_id: str) -> None:
        """Start the tether run once; a resume (in any process) finds and reuses it."""
        if run_id in self._started:
            return
        principal = self.principal if isinstance(self.principal, Principal) else self.principal(ctx)
        with self.gate.store.read() as tx:
            record = tx.get_run(run_id)
        if record is None:
            try:
                self.gate.start_run(principal, run_id=run_id, budget=self.budget)
            except AlreadyExists:
                with self.gate.store.read() as tx:  # another process started it first
                    record = tx.get_run(run_id)
                if record is None:
                    raise
        if record is not None:
            owner = RunState.load(record).principal
            if (owner.subject, owner.tenant) != (principal.subject, principal.tenant):
                raise RunStateError(
                    f"run {run_id} acts for {owner.subject} of tenant {owner.tenant}, not "
                    f"{principal.subject} of {principal.tenant}: one conversation is one "
                    "principal's run; start a new conversation (or pass another run_id)"
                )
        self._started.add(run_id)


def user_prompts(
    messages: Sequence[ModelMessage], prompt: str | Sequence[UserContent] | None = None
) -> list[str]:
    """The text of the user's prompts: those of the requests in ``messages`` that hold
    nothing but system and user prompts, then ``prompt`` (the run's own, ``RunContext.
    prompt``). A request that carries tool returns or retries is not the user's turn: a
    tool's ``ToolReturn.content`` reaches the model there as a ``UserPromptPart``."""
    texts: list[str] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        if not all(isinstance(p, UserPromptPart | SystemPromptPart) for p in message.parts):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                texts.extend(_prompt_texts(part.content))
    if prompt is not None:
        texts.extend(_prompt_texts(prompt))
    return texts


def _prompt_texts(content: str | Sequence[UserContent]) -> list[str]:
    """The text of a prompt: a string, or its strings and text parts (never files, images)."""
    items = [content] if isinstance(content, str) else list(content)
    texts = [
        item if isinstance(item, str) else item.content
        for item in items
        if isinstance(item, str | TextContent)
    ]
    return [t for t in texts if t]


def replacement(gate: Gate, run_id: str, call_id: str) -> Approval | None:
    """The approval an approver's edit in tether replaced ``call_id``'s with, if any."""
    approval = gate.approval_for(run_id, call_id)
    if approval is None or approval.status is not ApprovalStatus.EDITED:
        return None
    with gate.store.read() as tx:
        edited = tx.get_approval(approval.replaced_by or "")
    if edited is None:
        raise ResumeRefused(
            f"approval {approval.approval_id} of call {call_id} was edited, but its "
            f"replacement {approval.replaced_by} is missing from the store; nothing ran"
        )
    return edited


def edited_call(gate: Gate, run_id: str, call: ToolCall) -> ToolCall | None:
    """The call an approver's edit replaced ``call`` with: its own call id (so the ledger
    keeps it apart, and replays it on a second resume) and tether's edited arguments —
    never the arguments the client sent."""
    edited = replacement(gate, run_id, call.call_id)
    if edited is None:
        return None
    return ToolCall(call_id=edited.call_id, tool=call.tool, arguments=dict(edited.arguments))


def asks_again(metadata: Any) -> bool:
    return isinstance(metadata, Mapping) and metadata.get(ASK_AGAIN) is True


def check_history(gate: Gate, run_id: str, messages: Sequence[ModelMessage]) -> None:
    """Refuse a history whose tool results for governed tools are not the ones tether's
    ledger recorded for the same call ids in ``run_id``."""
    returns = [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_name in gate.registry
    ]
    if not returns:
        return
    effects = {e.call_id: e for e in gate.store.list_effects(run_id)}
    for part in returns:
        effect = effects.get(part.tool_call_id)
        if effect is None:
            # An edited call ran under its replacement's call id; its result answers the
            # model's original call.
            edited = replacement(gate, run_id, part.tool_call_id)
            effect = effects.get(edited.call_id) if edited is not None else None
        problem = _disagreement(gate, part, effect)
        if problem is not None:
            raise ResumeRefused(
                f"the message history holds a result of call {part.tool_call_id} "
                f"('{part.tool_name}') that {problem} in run {run_id}: tool results come from "
                "tether's ledger, not from the client; resume with the history the agent "
                "returned. Nothing ran"
            )


def _disagreement(gate: Gate, part: ToolReturnPart, effect: Effect | None) -> str | None:
    ran = effect is not None and effect.status.took_effect
    if part.outcome == "success":
        if effect is None:
            return "tether has no record of"
        if not ran:
            return f"tether recorded as {effect.status.value}"
        tool = gate.registry.find(part.tool_name)
        fields = tool.manifest.sensitive_fields if tool is not None else frozenset()
        try:
            # The ledger keeps the result as recorded (sensitive fields masked): mask the
            # same way, then compare digests.
            shown = "sha256:" + sha256_hex(canonical_json(redact(part.content, fields)[0]))
        except (TypeError, ValueError):
            return "is not JSON, unlike every result"
        return None if shown == effect.result_digest else "differs from the result tether recorded"
    if part.outcome == "failed":
        return None if effect is not None and not ran else "tether did not record as failed"
    # Denied, retried or interrupted: the history says it did not run.
    return "tether recorded as having run" if ran else None


def check_results(
    gate: Gate,
    run_id: str,
    response: ModelResponse,
    results: Mapping[str, ResumeResult],
    metadata: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Refuse deferred tool results that disagree with tether, before any call is made."""
    calls = {call.tool_call_id: call for call in response.tool_calls}
    metadata = metadata or {}
    for call_id, result in results.items():
        call = calls.get(call_id)
        if result == "skip" or call is None or call.tool_name not in gate.registry:
            continue  # a result in the history (checked there), or not a governed tool
        if isinstance(result, ToolDenied):
            continue  # declining to run a call is always the client's to do
        if not isinstance(result, ToolApproved):
            raise ResumeRefused(
                f"DeferredToolResults carries a result for call {call_id} ('{call.tool_name}'), "
                "a tool tether governs: its result comes from running it through the gate, "
                "never from the client; nothing ran"
            )
        edited = replacement(gate, run_id, call_id)
        if edited is not None:
            # An approver edited the call in tether: the gate runs tether's edited arguments
            # under the replacement's grant; override_args may only repeat them.
            given = result.override_args
            if given is not None and _bound(gate, call.tool_name, given, edited) != (
                canonical_json(dict(edited.arguments))
            ):
                raise ResumeRefused(
                    f"call {call_id} ('{call.tool_name}') was edited in tether (approval "
                    f"{edited.approval_id}), and override_args differ from the edited "
                    "arguments; nothing ran"
                )
            continue
        if result.override_args is not None:
            raise ResumeRefused(
                f"call {call_id} ('{call.tool_name}') is approved with override_args: changing "
                "a call's arguments is an edit an approver makes in tether (Gate.edit), not "
                "the client; nothing ran"
            )
        if not asks_again(metadata.get(call_id)):
            _check_grant(gate, run_id, call_id, call.tool_name, call.args_as_dict())


def _check_grant(
    gate: Gate, run_id: str, call_id: str, tool: str, arguments: dict[str, Any]
) -> None:
    approval = gate.approval_for(run_id, call_id)
    claim = f"call {call_id} ('{tool}') is marked approved in DeferredToolResults, but"
    if approval is None:
        raise ResumeRefused(
            f"{claim} tether never asked for its approval in run {run_id}; nothing ran"
        )
    status = approval.status
    if status not in (ApprovalStatus.APPROVED, ApprovalStatus.USED):
        by = f" by {approval.approver}" if approval.approver else ""
        raise ResumeRefused(
            f"{claim} tether's approval {approval.approval_id} is {status.value}{by}"
            + (
                f" (an approver decides it: tether approvals approve {approval.approval_id})"
                if status is ApprovalStatus.PENDING
                else ""
            )
            + "; nothing ran"
        )
    if _bound(gate, tool, arguments, approval) != canonical_json(dict(approval.arguments)):
        raise ResumeRefused(
            f"{claim} its arguments differ from those approval {approval.approval_id} "
            "granted; a changed call needs its own approval. Nothing ran"
        )


def _backed(error: TetherError) -> bool:
    """Whether tether did grant the call the client claims approved, and the grant lapsed
    since (an expired grant): the claim was true, so the model is told, not the client."""
    return isinstance(error, ApprovalExpired)


def _bound(gate: Gate, tool: str, arguments: dict[str, Any], approval: Approval) -> str:
    """The call's arguments as the gate binds them (the tenant filled in where it goes)."""
    found = gate.registry.find(tool)
    parts = found.manifest.tenant_parts if found is not None else None
    if parts is not None:
        arguments = fill_tenant(arguments, parts, approval.tenant)
    return canonical_json(arguments)


@dataclass
class Tether(AbstractCapability[Any]):
    """Governs an agent: provides the registry's tools through the gate (``toolset``, a
    ``GovernedToolset``) and checks what a client sends back to resume a run (deferred
    tool results and message history) before any tool runs."""

    gate: Gate
    principal: PrincipalSource
    run_id: RunIdSource = None
    budget: Budget | None = None
    toolset: GovernedToolset = field(init=False)

    def __post_init__(self) -> None:
        self.toolset = GovernedToolset.of(
            self.gate, self.principal, run_id=self.run_id, budget=self.budget
        )

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live gate: not part of an agent spec

    def get_toolset(self) -> GovernedToolset:
        return self.toolset

    async def before_node_run(self, ctx: RunContext[Any], *, node: Any) -> Any:
        if isinstance(node, CallToolsNode) and node.tool_call_results:
            run_id = run_id_for(ctx, self.run_id)
            check_results(
                self.gate,
                run_id,
                node.model_response,
                node.tool_call_results,
                node.tool_call_metadata,
            )
            check_history(self.gate, run_id, ctx.messages)
        return node

    def results(self, requests: DeferredToolRequests) -> DeferredToolResults:
        """tether's decisions on ``requests``, to resume with (see ``deferred_results``)."""
        return deferred_results(self.gate, requests)


def deferred_results(gate: Gate, requests: DeferredToolRequests) -> DeferredToolResults:
    """The ``DeferredToolResults`` tether's decisions make: approved calls approved, denied
    ones denied with the approver's reason (which reaches the model), edited ones approved
    with the approver's edited arguments (``override_args``), and the others (still
    pending, expired) sent back to be asked again: a resume waits again for a pending
    approval, and asks anew for an expired one."""
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    metadata: dict[str, dict[str, Any]] = {}
    for call in requests.approvals:
        pointer = requests.metadata.get(call.tool_call_id, {}).get("tether_approval_id")
        if not isinstance(pointer, str):
            raise ConfigurationError(
                f"deferred call {call.tool_call_id} ('{call.tool_name}') names no tether "
                "approval: it was not deferred by tether's gate"
            )
        with gate.store.read() as tx:
            approval = tx.get_approval(pointer)
        if approval is None or approval.call_id != call.tool_call_id:
            raise ResumeRefused(
                f"deferred call {call.tool_call_id} names approval {pointer}, which tether "
                "holds for no such call"
            )
        if approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.USED):
            approvals[call.tool_call_id] = ToolApproved()
        elif approval.status is ApprovalStatus.EDITED:
            # Pydantic AI's own form of an edit: the call, approved with other arguments
            # (the gate runs tether's edited call whatever the client sends here).
            edited = replacement(gate, approval.run_id, call.tool_call_id)
            assert edited is not None
            approvals[call.tool_call_id] = ToolApproved(override_args=dict(edited.arguments))
        else:
            # Denied, pending or expired: sent back claiming nothing, so the call reaches the
            # gate, which answers it (a denial's reason or an expiry told to the model and
            # audited, a pending request waited on again).
            approvals[call.tool_call_id] = ToolApproved()
            metadata[call.tool_call_id] = {ASK_AGAIN: True}
    return DeferredToolResults(approvals=approvals, metadata=metadata)
