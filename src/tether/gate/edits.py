"""An approver's edit, followed by the gate: the call the model proposed is the one the
request was made for, and the call that runs is the one the approver granted in its place.

Every entrance gets this from the gate (``Gate.call`` follows the edit), so none re-reads the
approval to swap arguments itself. The edited call is judged by the planner like any other
(validation, policy, provenance, the grant bound to it); the model reads a note saying what
was changed and by whom, above the result.
"""

from __future__ import annotations

from tether.core.approvals import Approval, CallBinding
from tether.core.digest import canonical_json
from tether.core.screening import redact
from tether.gate.plan import ToolCall
from tether.gate.state import RunState
from tether.tools.registry import Registry
from tether.tools.tenancy import fill_tenant


def is_the_requested_call(
    original: Approval, call: ToolCall, state: RunState, registry: Registry
) -> bool:
    """Whether ``call`` carries the arguments ``original`` was requested for (its tenant
    filled in as the planner fills it), so that following the edit answers this very call."""
    tool = registry.find(call.tool)
    if tool is None or tool.name != original.tool:
        return False
    try:
        arguments = dict(call.arguments)
        if tool.manifest.tenant_parts is not None:
            arguments = fill_tenant(arguments, tool.manifest.tenant_parts, state.principal.tenant)
        binding = CallBinding(
            run_id=original.run_id,
            call_id=original.call_id,
            tool=original.tool,
            tool_version=original.tool_version,
            tool_schema_digest=original.tool_schema_digest,
            arguments=arguments,
            tenant=original.tenant,
            actor=original.actor,
        )
    except Exception:  # arguments the planner refuses anyway: not the requested call
        return False
    return binding.argument_digest == original.argument_digest


def edited_call(edited: Approval) -> ToolCall:
    """The call the approver granted in place of the proposed one."""
    return ToolCall(
        call_id=edited.call_id,
        tool=edited.tool,
        arguments=dict(edited.arguments),
        tool_version=edited.tool_version,
    )


def edit_note(original: Approval, edited: Approval, registry: Registry) -> str:
    """What the model reads above the result: the call ran as an approver edited it."""
    known = registry.find(edited.tool)
    fields = known.manifest.sensitive_fields if known is not None else frozenset()
    shown = canonical_json(redact(dict(edited.arguments), fields)[0])
    replaced = f"approval {original.approval_id} replaced by {edited.approval_id}"
    return f"[arguments edited by {edited.approver} ({replaced}): {shown}]\n"
