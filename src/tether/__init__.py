"""tether: one governed, durable gate between an AI agent and the tools it calls.

The public API is the names below and the ``tether.errors`` namespace (every exception tether
raises, under ``TetherError``). Model adapters live in ``tether.models.openai`` and
``tether.models.anthropic``; the seeds' APIs in ``tether.compat``; the demo in ``tether.demo``.
Anything else is internal and may change.
"""

from tether import errors
from tether.app import App, load_app
from tether.approvals import Approval, ApprovalStatus
from tether.audit import AuditReport
from tether.budget import Budget
from tether.errors import TetherError
from tether.gate import Gate, Outcome, Result, ToolCall
from tether.identity import Identity
from tether.ledger import Effect, EffectStatus, operation_key
from tether.lifecycle import RunStatus
from tether.models import Message, Model, ModelToolCall
from tether.models.scripted import ScriptedModel
from tether.policy import Decision, Policy, Principal, Verdict, decide
from tether.recovery import recover, rollback
from tether.runs import Runner, RunResult, Step
from tether.store import MemoryStore, SQLiteStore, Store, open_store
from tether.tools import Manifest, Registry, Risk
from tether.worker import Worker

__all__ = [
    "App",
    "Approval",
    "ApprovalStatus",
    "AuditReport",
    "Budget",
    "Decision",
    "Effect",
    "EffectStatus",
    "Gate",
    "Identity",
    "Manifest",
    "MemoryStore",
    "Message",
    "Model",
    "ModelToolCall",
    "Outcome",
    "Policy",
    "Principal",
    "Registry",
    "Result",
    "Risk",
    "RunResult",
    "RunStatus",
    "Runner",
    "SQLiteStore",
    "ScriptedModel",
    "Step",
    "Store",
    "TetherError",
    "ToolCall",
    "Verdict",
    "Worker",
    "decide",
    "errors",
    "load_app",
    "open_store",
    "operation_key",
    "recover",
    "rollback",
]
