"""Steps 9-10, decided: what a tool's return (or exception) means for its effect, its
outcome, its audit entry and the run's budget — a pure function of the admitted plan, the
tool's answer and the time, as ``tether.gate.plan`` is of the call before it. The gate
writes what ``settle`` decides, in one transaction.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import Effect, EffectStatus
from tether.core.screening import redact, screen_result, scrub
from tether.errors import OutcomeUnknown, ToolFailed
from tether.gate.plan import Admit, Outcome

__all__ = ["Result", "Settled", "settle"]


@dataclass(frozen=True)
class Result:
    """What a handler may return to name the outside system's record of the call."""

    value: Any
    external_reference: str | None = None


@dataclass(frozen=True, kw_only=True)
class Settled:
    """What the tool's answer means, before anything is written."""

    at: float
    effect: Effect  # the admitted effect, advanced to its outcome
    outcome: Outcome  # what the caller gets when the tool did not fail
    failure: BaseException | None  # what the caller gets when it did (or may have)
    safe_value: Any  # the value as recorded (redacted)
    result_json: str | None
    screen_flags: tuple[str, ...]
    redactions: list[str]
    event: dict[str, Any]  # the ``tool_effect_resolved`` audit entry and listener event
    refund: bool  # a failed call did not happen, so it costs nothing (an unknown one may have)
    added_bytes: int  # output bytes the run's budget counts


def settle(
    admitted: Admit, raw: Any, error: BaseException | None, now: float, latency_ms: float
) -> Settled:
    """The outcome of ``admitted``'s tool: ``raw`` it returned, or the ``error`` it raised
    (a timeout or a cancellation: unknown; anything else: failed)."""
    tool, effect = admitted.tool, admitted.effect
    failure: BaseException | None = None
    if error is None:
        target = EffectStatus.COMMITTED
    elif isinstance(error, TimeoutError) or _is_cancellation(error):
        target = EffectStatus.UNKNOWN
        failure = OutcomeUnknown(tool.name, effect.operation_key)
    else:
        target = EffectStatus.FAILED
        detail = _safe_error(error, admitted.secrets)
        failure = ToolFailed(tool.name, effect.operation_key, error, detail=detail)
        failure.__cause__ = error
    value, text, reference, problem = (
        _recordable(raw) if failure is None else (None, "null", None, None)
    )
    safe_value, result_redactions = redact(value, tool.manifest.sensitive_fields)
    if target is not EffectStatus.COMMITTED:
        result_json = None
    elif result_redactions:
        result_json = canonical_json(safe_value)
    else:
        # Nothing was redacted: ``redact`` gave back a copy equal to the value, so the text
        # made while checking it is the record (encoded once).
        result_json = text
    screened = screen_result(
        safe_value if isinstance(safe_value, str) or result_json is None else result_json,
        tool.manifest.max_result_bytes,
    )
    if problem is not None:
        screened = replace(screened, flags=(*screened.flags, problem))
    resolved = effect.advance(
        target,
        now,
        result_json=result_json,
        result_digest=None if result_json is None else "sha256:" + sha256_hex(result_json),
        external_reference=reference,
        error=problem
        if failure is None
        else _safe_error(failure.__cause__ or failure, admitted.secrets),
    )
    redactions = sorted(set(admitted.redactions) | set(result_redactions))
    event: dict[str, Any] = {
        "event": "tool_effect_resolved",
        "run_id": effect.run_id,
        "step_id": f"step-{admitted.step}",
        "call_id": effect.call_id,
        "operation_key": effect.operation_key,
        "tool": tool.name,
        "tool_version": effect.tool_version,
        "policy_version": admitted.decision.policy_version,
        "policy_decision": admitted.label,
        "effect_status": target.value,
        "result_digest": resolved.result_digest,
        "external_reference": reference,
        "latency_ms": latency_ms,
        "redactions": redactions,
    }
    committed = target is EffectStatus.COMMITTED
    outcome = Outcome(
        operation_key=effect.operation_key,
        status=target,
        result=value,
        text=admitted.note + screened.text,
        replayed=False,
        policy_decision=admitted.label,
        external_reference=reference,
        flags=admitted.flags + tuple(f"redacted '{n}'" for n in redactions) + screened.flags,
    )
    return Settled(
        at=now,
        effect=resolved,
        outcome=outcome,
        failure=failure,
        safe_value=safe_value,
        result_json=result_json,
        screen_flags=screened.flags,
        redactions=redactions,
        event=event,
        refund=target is EffectStatus.FAILED and tool.manifest.cost > 0,
        added_bytes=len(screened.text.encode()) if admitted.counts_bytes and committed else 0,
    )


def _is_cancellation(error: BaseException) -> bool:
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(error, asyncio.CancelledError)


def _unwrap(raw: Any) -> tuple[Any, str | None]:
    if isinstance(raw, Result):
        return raw.value, raw.external_reference
    if isinstance(raw, Mapping) and isinstance(raw.get("external_reference"), str):
        return dict(raw), raw["external_reference"]
    return raw, None


def _recordable(raw: Any) -> tuple[Any, str, str | None, str | None]:
    """The tool's answer as JSON (pydantic models, dataclasses, datetimes, enums, sets...),
    its canonical JSON text, its external reference, and why it could not be kept, if it
    could not. The call has
    happened either way, so an answer that is not JSON becomes a recorded note, never an
    exception that would leave the effect ``dispatched`` and make a retry look like a
    timeout."""
    try:
        value, reference = _unwrap(raw)
        if not isinstance(value, str | int | float | bool | type(None)):
            import pydantic_core  # rich values only; the import costs start-up time

            value = pydantic_core.to_jsonable_python(value)
        # NaN, infinities, cycles, huge integers and lone surrogates fail here, not in the
        # store after the tool has run.
        text = canonical_json(value)
        text.encode("utf-8")
        if reference is not None and not isinstance(reference, str):
            reference = str(reference)
        return value, text, reference, None
    except Exception as e:
        problem = f"result could not be recorded as JSON ({type(e).__name__}: {e})"[:500]
        note = {"error": "result_not_json", "detail": problem}
        return note, canonical_json(note), None, problem


def _safe_error(error: BaseException, secrets: tuple[str, ...]) -> str:
    """An exception as it may be stored and shown: arguments' secrets and anything that
    looks like a credential removed (a failing client often quotes the password it used)."""
    text = repr(error)[:2000]
    return str(redact(scrub(text, secrets))[0])
