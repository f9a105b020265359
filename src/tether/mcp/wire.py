"""What the gateway says on the wire: a governed call's outcome, a refusal or an approval
wait as an MCP ``CallToolResult`` (with tether's ``_meta``), an upstream result as text, and
the JSON-RPC error for a line that is not a message."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.mcp.capped import CAPPED, WHOLE, cap, capped_note

if TYPE_CHECKING:
    import mcp_types

    from tether.errors import ApprovalRequired
    from tether.gate.plan import Outcome

APPROVAL_META = "io.tether/approval"
OUTCOME_META = "io.tether/outcome"


def text_of(result: mcp_types.CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        text = getattr(block, "text", None)
        if isinstance(text, str):
            parts.append(text)
        else:
            kind = getattr(block, "type", "content")
            mime = getattr(block, "mime_type", None)
            parts.append(f"[{kind}{' ' + mime if mime else ''} omitted by the gateway]")
    return "\n".join(parts)


# The key that marks a recorded result as an MCP result as the server gave it.
ENVELOPE = "io.tether/mcp-result"


def envelope(result: mcp_types.CallToolResult, max_bytes: int | None = None) -> dict[str, Any]:
    """An upstream result as the ledger records it: its content blocks and structured
    content in their wire form, unchanged — or, over ``max_bytes``, capped
    (``tether.mcp.capped``)."""
    body: dict[str, Any] = {
        ENVELOPE: 1,
        "content": [b.model_dump(by_alias=True, exclude_none=True) for b in result.content],
    }
    if result.structured_content is not None:
        body["structuredContent"] = result.structured_content
    if max_bytes is None:
        return body
    whole = (result.meta or {}).get(WHOLE)
    return cap(body, max_bytes, ENVELOPE, whole if isinstance(whole, Mapping) else None)


def result_of(outcome: Outcome, sensitive: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A call's outcome as the client gets it. A recorded MCP result passes through as the
    server gave it (redacted as the ledger holds it), unless the gate had to change what the
    model sees — cut to the tool's size limit, or marked as untrusted data — when the gate's
    text is what goes (with the structured content, if it was not cut). A warning the gate
    adds (instruction-like text) comes first, as its own text block."""
    from tether.core.screening import INJECTION_FLAG, redact

    meta = {
        OUTCOME_META: {
            "operation_key": outcome.operation_key,
            "status": outcome.status.value,
            "replayed": outcome.replayed,
            "policy_decision": outcome.policy_decision,
            "flags": list(outcome.flags),
        }
    }
    body: dict[str, Any] = {"isError": False, "_meta": meta, "resultType": "complete"}
    recorded = outcome.result
    cut = any(f.startswith("result over ") for f in outcome.flags)
    if isinstance(recorded, Mapping) and recorded.get(ENVELOPE) == 1:
        safe = redact(dict(recorded), sensitive)[0]
        marked = outcome.text.startswith("<<untrusted ")
        capped = safe.get(CAPPED)
        if cut or marked:
            body["content"] = [{"type": "text", "text": outcome.text}]
        else:
            body["content"] = list(safe.get("content") or [])
            if isinstance(capped, Mapping):
                body["content"].append({"type": "text", "text": capped_note(capped)})
            if INJECTION_FLAG in outcome.flags:
                warning = outcome.text.split("\n", 1)[0]
                body["content"].insert(0, {"type": "text", "text": warning})
        if "structuredContent" in safe and not cut:
            body["structuredContent"] = safe["structuredContent"]
        if isinstance(capped, Mapping):
            meta[CAPPED] = dict(capped)
        return body
    body["content"] = [{"type": "text", "text": outcome.text}]
    return body


def error_result(text: str, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "resultType": "complete",  # as ``CallToolResult``'s dump has it
    }
    if meta:
        body["_meta"] = dict(meta)
    return body


def approval_wait(wait: ApprovalRequired, call_id: str) -> dict[str, Any]:
    text = (
        f"tether: '{wait.action_name}' needs a human's approval before it runs (approval "
        f"{wait.approval_id}). An approver approves it with `tether approvals approve "
        f"{wait.approval_id}` (their credential in TETHER_APPROVER_TOKEN); then call "
        "'{tool}' again with the same arguments and it runs, once. Nothing has run yet."
    ).replace("{tool}", wait.action_name)
    meta = {
        APPROVAL_META: {
            "approval_id": wait.approval_id,
            "status": "pending",
            "call_id": call_id,
            "expires_at": wait.expires_at,
            "approve": f"tether approvals approve {wait.approval_id}",
        }
    }
    return error_result(text, meta)


def protocol_error(error: Exception) -> Any:
    """The JSON-RPC error answering a line that is not a JSON-RPC message."""
    import mcp_types
    import pydantic

    not_json = isinstance(error, pydantic.ValidationError) and any(
        e.get("type") == "json_invalid" for e in error.errors()
    )
    code, what = (-32700, "Parse error") if not_json else (-32600, "Invalid Request")
    return mcp_types.JSONRPCError(
        jsonrpc="2.0",
        id=None,
        error=mcp_types.ErrorData(code=code, message=f"{what}: {str(error)[:200]}"),
    )
