"""tether: one governed, durable gate between an AI agent and the tools it calls."""

from tether.app import App, load_app
from tether.approvals import Approval, ApprovalStatus
from tether.audit import AuditReport
from tether.budget import Budget
from tether.compat import AgentHarness, PermissionLevel, RegisteredAction, RollbackCoordinator
from tether.errors import (
    ApprovalDenied,
    ApprovalRequired,
    BudgetExceeded,
    Denied,
    HumanApprovalRequired,
    IntegrityError,
    InvalidArguments,
    ModelError,
    OperationConflict,
    OutcomeUnknown,
    PolicyDenied,
    RunConflict,
    RunStateError,
    Signal,
    StaleState,
    TetherError,
    ToolFailed,
    UnknownToolError,
)
from tether.gate import Gate, Outcome, Result, ToolCall
from tether.identity import Identity
from tether.ledger import Effect, EffectStatus, operation_key
from tether.lifecycle import RunStatus
from tether.models import Message, Model, ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.policy import Decision, Policy, Principal, Verdict, decide
from tether.recovery import recover, rollback
from tether.runs import Runner, RunResult, Step, run_with_approval
from tether.sandbox import sandboxed_eval
from tether.store import MemoryStore, SQLiteStore, Store, open_store
from tether.tools import Manifest, Registry, Risk
from tether.worker import Worker

__all__ = [
    "AgentHarness",
    "App",
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
    "Identity",
    "IntegrityError",
    "InvalidArguments",
    "Manifest",
    "MemoryStore",
    "Message",
    "Model",
    "ModelError",
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
    "RunConflict",
    "RunResult",
    "RunStateError",
    "RunStatus",
    "Runner",
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
    "Worker",
    "decide",
    "load_app",
    "open_store",
    "operation_key",
    "recover",
    "rollback",
    "run_with_approval",
    "sandboxed_eval",
]
