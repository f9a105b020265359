"""Every error tether raises, under one root.

Each message says what happened and what to do about it. Control signals (a call that must
wait for a human) are kept apart from failures: they are not errors, and code that catches
``TetherError`` to report failures does not swallow them. The module is long because it is
the one place every error is defined, each with the words it says.

    TetherError
    ├── ConfigurationError          a registry, policy or URL that cannot be used
    │   ├── MissingExtra            an optional part used without its extra installed
    │   ├── IdentityError           a registration or token file that cannot be used
    │   ├── AuditKeyMissing         the audit key a store or entry names is not to be found
    │   └── CheckpointUnreadable    a file that is not a tether checkpoint
    ├── Denied                      the gate refused the call (also a PermissionError)
    │   ├── CredentialRefused       a credential unknown, revoked, malformed or of another kind
    │   ├── CredentialMissing       an action that needs a credential, asked without one
    │   ├── ResultRefused           a client-supplied result for a governed call
    │   ├── UnknownToolError        the tool is not in the registry
    │   ├── ManifestDriftError      the tool's manifest no longer matches its pin
    │   ├── PolicyDenied            the policy said deny (reasons attached)
    │   ├── ApprovalDenied          a human denied the call
    │   ├── PinError                an MCP tool that drifted from its pin, or was never pinned
    │   └── ApprovalInvalid         a grant that does not bind this call
    │       ├── ApprovalExpired
    │       ├── ApprovalAlreadyUsed
    │       └── ApproverNotAuthorized
    ├── InvalidArguments            arguments that break the tool's schema (also a ValueError)
    ├── BudgetExceeded              steps, cost or bytes would go over the budget
    ├── ApprovalStateError          deciding an approval that is unknown or already decided
    ├── RunStateError               resuming a run that is unknown or already finished
    │   └── RunNotFound             no run with that id (also a NotFound)
    ├── NotFound                    no effect, approval or credential with that id (a LookupError)
    ├── RunConflict                 another worker holds the run's lease
    │   └── CallInFlight            another resume is running this very call right now
    ├── OperationConflict           a call already recorded, proposed again changed
    ├── InvalidTransition           an effect state change the state machine forbids
    ├── ToolFailed                  the tool raised; the effect is recorded as failed
    ├── OutcomeUnknown              the tool timed out (or is still in flight): outcome unknown
    ├── UpstreamLost                an MCP upstream went away mid-call (also a TimeoutError)
    ├── CancelUnanswered            an MCP call cancelled, its server silent (a TimeoutError)
    ├── CancelledUnsent             an MCP call cancelled before it was sent upstream
    ├── StoreError                  the store cannot do what was asked
    │   ├── StoreUnavailable        the store cannot be reached or opened
    │   ├── AlreadyExists           a record with that id is already stored
    │   ├── StoreMissing            no store where a command that must not create one looked
    │   ├── ReadOnlyStore           a write to a store opened read-only
    │   └── StaleState              a compare-and-swap lost (someone else wrote first)
    ├── ModelError                  a model provider answered with an error or garbage
    ├── IntegrityError              the store's state and its evidence disagree (tampering)
    ├── InternalError               a bug: tether could not finish a step (nothing half-done)
    └── SandboxError                sandboxed code failed, ran too long or used too much memory

    Signal (not an error)
    └── ApprovalRequired            a human must approve; carries the approval id
"""

from __future__ import annotations

from typing import Any, ClassVar


class TetherError(Exception):
    """Root of every failure tether raises."""

    #: Whether the agent's model reads this refusal as the call's result (and may try
    #: something else), rather than the run stopping for the code that drives it. Every
    #: entrance asks this, so one refusal means one thing everywhere (``tether.gate.answer``).
    model_reads: ClassVar[bool] = False


class ConfigurationError(TetherError):
    """A registry, policy, store URL or app reference that cannot be used."""


class MissingExtra(ConfigurationError, ImportError):
    """An optional part of tether was used without the extra that installs its packages
    (``tether.extras``); an ``ImportError`` too, so ``except ImportError`` still sees it."""

    def __init__(self, what: str, extra: str, module: str) -> None:
        ConfigurationError.__init__(
            self,
            f"{what} needs tether's [{extra}] extra, which is not installed (no module named "
            f"{module!r}): in tether's checkout, pip install -e '.[{extra}]'",
        )
        self.extra, self.module = extra, module


class Denied(TetherError, PermissionError):
    """The gate refused to run a call."""

    model_reads = True

    def __init__(self, message: str, *, reasons: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = reasons


class CredentialRefused(Denied):
    """A credential that is unknown, revoked, malformed or of the wrong kind. The message is
    the same in every case, so a refusal says nothing about who is registered."""

    model_reads = False


class CredentialMissing(Denied):
    """An action that needs a credential was asked for without one."""

    model_reads = False


class IdentityError(ConfigurationError):
    """A registration or a token file that cannot be used as given."""


class AuditKeyMissing(ConfigurationError):
    """The key an entry, a seal or the store names is not in the keyring that was found."""


class CheckpointUnreadable(ConfigurationError):
    """The file is not a tether checkpoint (or not one this version can read)."""


class ResultRefused(Denied):
    """A tool result the client put into a run's history or state for a call tether
    governs, which tether's ledger does not hold: results come only from the gate, so the
    resume is refused before anything runs."""

    model_reads = False


class UnknownToolError(Denied):
    """The tool is not in the registry, so the call is blocked."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"Action '{name}' not in registry. Execution blocked. "
            "Register the tool before the agent may call it.",
            reasons=("unknown tool",),
        )
        self.tool = name


class ManifestDriftError(Denied):
    def __init__(self, name: str, pinned: str, actual: str) -> None:
        super().__init__(
            f"tool '{name}' changed since it was pinned (pinned {pinned}, now {actual}); "
            "review the new manifest and pin it again.",
            reasons=("manifest drift",),
        )
        self.tool = name


class PolicyDenied(Denied):
    """The policy's verdict is deny; ``reasons`` says why."""

    def __init__(self, tool: str, reasons: tuple[str, ...], policy_version: str) -> None:
        super().__init__(
            f"policy {policy_version} denies '{tool}': {'; '.join(reasons)}", reasons=reasons
        )
        self.tool = tool
        self.policy_version = policy_version


class ApprovalDenied(Denied):
    """A human decided against the call; it will not run."""

    def __init__(self, approval_id: str, tool: str, approver: str | None, reason: str | None):
        super().__init__(
            f"approval {approval_id} for '{tool}' was denied by {approver}"
            + (f": {reason}" if reason else ""),
            reasons=("approval denied",),
        )
        self.approval_id = approval_id
        self.tool = tool
        self.reason = reason


class ApprovalInvalid(Denied):
    """A grant exists but does not authorise this exact call."""


class ApprovalExpired(ApprovalInvalid):
    pass


class ApprovalAlreadyUsed(ApprovalInvalid):
    pass


class ApproverNotAuthorized(ApprovalInvalid):
    pass


class InvalidArguments(TetherError, ValueError):
    """Arguments that break the tool's JSON Schema; ``problems`` lists each one."""

    model_reads = True

    def __init__(self, tool: str, problems: list[str]) -> None:
        super().__init__(f"arguments for '{tool}' do not match its schema: {'; '.join(problems)}")
        self.tool = tool
        self.problems = problems


class BudgetExceeded(TetherError):
    """A step, cost or byte budget would go negative; the message gives the numbers."""

    model_reads = True

    def __init__(self, kind: str, action: str, need: int, remaining: int) -> None:
        super().__init__(
            f"{kind} budget exhausted for '{action}': need {need}, remaining {remaining}"
        )
        self.kind = kind
        self.action = action
        self.need = need
        self.remaining = remaining


# The seed documents call it this; the alias keeps their code readable.
BudgetExhaustedError = BudgetExceeded


class ApprovalStateError(TetherError):
    """An approval that cannot be decided: unknown, already decided, or expired."""


class RunStateError(TetherError):
    """A run that cannot do what was asked: unknown, finished, or inconsistent."""


class NotFound(TetherError, LookupError):
    """No record with that id: an effect, an approval or a credential (a run: ``RunNotFound``)."""


class RunNotFound(NotFound, RunStateError):
    """No run with that id."""


class RunConflict(TetherError):
    """Another worker is driving the run; exactly one may."""


class CallInFlight(RunConflict):
    """The call was dispatched and has no recorded outcome yet because another resume in
    this process is running it right now. It is never sent twice; wait for that one's
    answer. (A dispatched call sent by another process is ``OutcomeUnknown``: its sender may
    have died, which only reconciliation can tell.)"""

    def __init__(self, tool: str, operation_key: str) -> None:
        super().__init__(
            f"'{tool}' ({operation_key}) is in flight: another resume is running it and "
            "its outcome is not recorded yet, so it is not sent again — wait for that "
            "resume's answer"
        )
        self.tool = tool
        self.operation_key = operation_key


class OperationConflict(TetherError):
    """A call already recorded, proposed again with something changed (tool, version,
    schema or arguments): never dispatched again, never a replay of the other call."""

    model_reads = True

    def __init__(self, operation_key: str, changes: tuple[str, ...] = ("arguments",)) -> None:
        super().__init__(
            f"this call was already recorded as {operation_key}, and now its "
            f"{', '.join(changes)} differ; it is never dispatched again: "
            "a new call needs a new call id"
        )
        self.operation_key = operation_key
        self.changes = changes


class InvalidTransition(TetherError):
    def __init__(self, operation_key: str, current: str, target: str) -> None:
        super().__init__(
            f"effect {operation_key} cannot go from {current} to {target}; "
            "this is a bug in the caller"
        )


class ToolFailed(TetherError):
    """The tool raised; the effect is recorded as failed."""

    model_reads = True

    def __init__(
        self, tool: str, operation_key: str, cause: BaseException, *, detail: str | None = None
    ) -> None:
        # ``detail``: the cause as it may be shown and stored (secrets already removed).
        super().__init__(f"tool '{tool}' failed ({operation_key}): {detail or repr(cause)}")
        self.tool = tool
        self.operation_key = operation_key


class OutcomeUnknown(TetherError):
    """The tool may or may not have acted (timeout, or still in flight); reconcile it."""

    def __init__(self, tool: str, operation_key: str) -> None:
        super().__init__(
            f"the outcome of '{tool}' ({operation_key}) is unknown: it timed out, was cut off,"
            " or is still running elsewhere; it is not sent again until the effect is "
            "reconciled (`tether effects list`, `tether recover`)"
        )
        self.tool = tool
        self.operation_key = operation_key


class UpstreamLost(TetherError, TimeoutError):
    """An MCP upstream's connection ended while a call was in flight: it may have acted, so
    the gate records the effect as unknown (a ``TimeoutError``, as for a tool that timed out)."""


class CancelUnanswered(TetherError, TimeoutError):
    """A client cancelled an MCP call and its server, told so, did not answer in time. A
    server that honours a cancellation sends no answer, but it may have acted before it
    stopped: the gate records the effect as unknown (a ``TimeoutError``)."""


class CancelledUnsent(TetherError):
    """A client cancelled an MCP call before the gateway sent it to its server: it never
    reached the server, so the gate records the effect as failed (it did not happen)."""


class PinError(Denied):
    """An MCP tool is not offered as pinned: it drifted since ``tether mcp pin``, or it was
    never pinned. What changed is in the message."""


class StoreError(TetherError):
    """The store cannot do what was asked; the message keeps the driver's own words."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or opened (a server that does not answer, a file that
    cannot be opened); nothing was read or written. Trying again later may work."""


class AlreadyExists(StoreError):
    """A record with that id is already stored (a run, an approval, a credential, a step);
    nothing was written. Use another id, or read the one that exists."""


class StoreMissing(StoreError):
    """There is no tether store where a command that must not create one looked."""


class ReadOnlyStore(StoreError):
    """A write was attempted on a store opened read-only."""


class StaleState(StoreError):
    """A compare-and-swap on a run lost: someone else wrote it first."""

    def __init__(self, run_id: str, expected: int, actual: int | None) -> None:
        super().__init__(
            f"run {run_id} was changed by someone else (expected version {expected}, "
            f"found {actual}); reload the run and try again"
        )
        self.run_id = run_id


class ModelError(TetherError):
    """The model could not be asked: an HTTP error, a refused key, an unreadable answer.

    ``retryable``: asking again later may work (a timeout, a rate limit, the provider's own
    failure, a connection that did not open). A run whose model fails so waits
    (``awaiting_model``) rather than failing; any other model error ends the run."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class IntegrityError(TetherError):
    """The store's state and its evidence disagree: rows were changed, removed or added
    outside tether. The gate fails closed; ``tether audit verify`` says what changed."""


class InternalError(TetherError):
    """tether could not finish a step because of a bug; the step's transaction was rolled
    back, so nothing is half-written."""


class SandboxError(TetherError):
    pass


class Signal(Exception):
    """A control signal: something the caller must act on, not a failure."""


class ApprovalRequired(Signal):
    """The call needs a human decision; it has been persisted as a pending approval."""

    def __init__(
        self, approval_id: str, tool: str, arguments: dict[str, Any], expires_at: float
    ) -> None:
        super().__init__(
            f"'{tool}' needs approval {approval_id} before it runs (an approver, with their "
            f"credential in TETHER_APPROVER_TOKEN: tether approvals approve {approval_id})"
        )
        self.approval_id = approval_id
        self.action_name = tool
        self.action_args = arguments
        self.expires_at = expires_at


# Seed 003's name for the same signal.
HumanApprovalRequired = ApprovalRequired
