"""tether: one governed, durable gate between an AI agent and the tools it calls.

The public API is the names below and the ``tether.errors`` namespace (every exception tether
raises, under ``TetherError``). Model adapters live in ``tether.models.openai`` and
``tether.models.anthropic``; the seeds' APIs in ``tether.compat``; the demo in ``tether.demo``.
Anything else is internal and may change.
"""

# The names are loaded on first use (PEP 562), so `import tether` — and every `tether`
# command, whose package this is — does not pay for the whole core up front; `from tether
# import Gate` loads what the gate needs, once.
import importlib as _importlib
import typing as _typing

_EXPORTS = {
    "App": "tether.app",
    "Approval": "tether.approvals",
    "ApprovalStatus": "tether.approvals",
    "AuditReport": "tether.audit",
    "Budget": "tether.budget",
    "Decision": "tether.policy",
    "Effect": "tether.ledger",
    "EffectStatus": "tether.ledger",
    "Gate": "tether.gate",
    "Identity": "tether.identity",
    "Manifest": "tether.tools",
    "MemoryStore": "tether.store",
    "Message": "tether.models",
    "Model": "tether.models",
    "ModelToolCall": "tether.models",
    "Outcome": "tether.gate",
    "Policy": "tether.policy",
    "Principal": "tether.policy",
    "Registry": "tether.tools",
    "Result": "tether.gate",
    "Risk": "tether.tools",
    "RunResult": "tether.runs",
    "RunStatus": "tether.lifecycle",
    "Runner": "tether.runs",
    "SQLiteStore": "tether.store",
    "ScriptedModel": "tether.models.scripted",
    "Step": "tether.runs",
    "Store": "tether.store",
    "TetherError": "tether.errors",
    "ToolCall": "tether.gate",
    "Verdict": "tether.policy",
    "Worker": "tether.worker",
    "decide": "tether.policy",
    "errors": "tether.errors",
    "load_app": "tether.app",
    "open_store": "tether.store",
    "operation_key": "tether.ledger",
    "recover": "tether.recovery",
    "rollback": "tether.recovery",
}

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


def __getattr__(name: str) -> _typing.Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    loaded = _importlib.import_module(module)
    value = loaded if name == "errors" else getattr(loaded, name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if _typing.TYPE_CHECKING:
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
