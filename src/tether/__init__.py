"""tether: one governed, durable gate between an AI agent and the tools it calls."""

from tether.approvals import Approval, ApprovalStatus
from tether.audit import AuditReport
from tether.budget import Budget
from tether.errors import (
    ApprovalDenied,
    ApprovalRequired,
    BudgetExceeded,
    Denied,
    HumanApprovalRequired,
    InvalidArguments,
    OperationConflict,
    OutcomeUnknown,
    PolicyDenied,
    Signal,
    StaleState,
    TetherError,
    ToolFailed,
    UnknownToolError,
)
from tether.gate import Gate, Outcome, Result, ToolCall
from tether.harness import AgentHarness, PermissionLevel, RegisteredAction, RollbackCoordinator
from tether.ledger import Effect, EffectStatus, operation_key
from tether.models import Message, Model, ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.policy import Decision, Policy, Principal, Verdict, decide
from tether.runs import RunResult, Step, run_with_approval
from tether.sandbox import sandboxed_eval
from tether.store import MemoryStore, SQLiteStore, Store, open_store
from tether.tools import Manifest, Registry, Risk

__all__ = [
    "AgentHarness",
    "Approval",
    "ApprovalDenied",
    "ApprovalRequired",
    "ApprovalStatus",
    "AuditReport",
    "Budget",
    "BudgetExceeded",
    "Decision",
    "Denied",
    "Effect",
    "EffectStatus",
    "Gate",
    "HumanApprovalRequired",
    "InvalidArguments",
    "Manifest",
    "MemoryStore",
    "Message",
    "Model",
    "ModelToolCall",
    "OperationConflict",
    "Outcome",
    "OutcomeUnknown",
    "PermissionLevel",
    "Policy",
    "PolicyDenied",
    "Principal",
    "RegisteredAction",
    "Registry",
    "Result",
    "Risk",
    "RollbackCoordinator",
    "RunResult",
    "SQLiteStore",
    "ScriptedModel",
    "Signal",
    "StaleState",
    "Step",
    "Store",
    "TetherError",
    "ToolCall",
    "ToolFailed",
    "UnknownToolError",
    "Verdict",
    "decide",
    "open_store",
    "operation_key",
    "run_with_approval",
    "sandboxed_eval",
]
