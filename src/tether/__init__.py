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
    "App": "tether.runs.app",
    "Approval": "tether.core.approvals",
    "ApprovalStatus": "tether.core.approvals",
    "AuditReport": "tether.evidence.audit",
    "Budget": "tether.core.budget",
    "Decision": "tether.policy.rules",
    "Effect": "tether.core.ledger",
    "EffectStatus": "tether.core.ledger",
    "Gate": "tether.gate.pipeline",
    "Identity": "tether.identity",
    "Manifest": "tether.tools.registry",
    "MemoryStore": "tether.store",
    "Message": "tether.models",
    "Model": "tether.models",
    "ModelToolCall": "tether.models",
    "Outcome": "tether.gate.pipeline",
    "Policy": "tether.policy.rules",
    "Principal": "tether.policy.rules",
    "Registry": "tether.tools.registry",
    "Result": "tether.gate.settle",
    "Risk": "tether.tools.registry",
    "RunResult": "tether.runs.runner",
    "RunStatus": "tether.core.lifecycle",
    "Runner": "tether.runs.runner",
    "SQLiteStore": "tether.store",
    "ScriptedModel": "tether.models.scripted",
    "Step": "tether.runs.runner",
    "Store": "tether.store",
    "TetherError": "tether.errors",
    "ToolCall": "tether.gate.pipeline",
    "Verdict": "tether.policy.rules",
    "Worker": "tether.runs.worker",
    "decide": "tether.policy.rules",
    "errors": "tether.errors",
    "load_app": "tether.runs.app",
    "open_store": "tether.store",
    "operation_key": "tether.core.ledger",
    "recover": "tether.runs.recovery",
    "rollback": "tether.runs.recovery",
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
    if name == "__version__":
        # One place says the version: pyproject.toml, as the installed metadata holds it.
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("tether-gate")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
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
    from tether.core.approvals import Approval, ApprovalStatus
    from tether.core.budget import Budget
    from tether.core.ledger import Effect, EffectStatus, operation_key
    from tether.core.lifecycle import RunStatus
    from tether.core.principal import Identity, Principal
    from tether.core.verdicts import Verdict
    from tether.errors import TetherError
    from tether.evidence.audit import AuditReport
    from tether.gate.pipeline import Gate, Outcome, ToolCall
    from tether.gate.settle import Result
    from tether.models import Message, Model, ModelToolCall
    from tether.models.scripted import ScriptedModel
    from tether.policy.rules import Decision, Policy, decide
    from tether.runs.app import App, load_app
    from tether.runs.recovery import recover, rollback
    from tether.runs.runner import Runner, RunResult, Step
    from tether.runs.worker import Worker
    from tether.store import MemoryStore, SQLiteStore, Store, open_store
    from tether.tools.registry import Manifest, Registry, Risk
