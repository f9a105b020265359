"""The seeds' APIs, kept for code written against them, built on the gate.

tether was specified from three seed documents; their entry points live here, apart from the
core: seed 003's ``AgentHarness`` (with ``PermissionLevel``, ``RegisteredAction``,
``RollbackCoordinator``), seed 004's ``run_with_approval`` loop and its sandboxed expression
evaluator ``sandboxed_eval`` (the ``sandbox`` extra). New code uses ``Gate`` and ``Runner``.

``AgentHarness.execute`` runs a registered action through the full pipeline (screening,
registry, budget, approval, ledger, audit); irreversible actions raise
``HumanApprovalRequired`` and run only through ``approve_and_execute``. Write and admin
actions run inside a ``RollbackCoordinator`` transaction over the harness's state, as in the
seed.

``execute`` runs a registered action through the full pipeline (screening, registry, budget,
approval, ledger, audit); irreversible actions raise ``HumanApprovalRequired`` and run only
through ``approve_and_execute``. Write and admin actions run inside a
``RollbackCoordinator`` transaction over the harness's state, as in the seed.
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tether.compat.sandbox import sandboxed_eval
from tether.core.budget import Budget
from tether.core.digest import digest
from tether.core.principal import Principal
from tether.core.verdicts import Verdict
from tether.errors import ApprovalRequired, ConfigurationError
from tether.gate.pipeline import Gate, ToolCall
from tether.models import Model
from tether.policy.rules import Policy
from tether.runs.runner import Approver, Runner, RunResult
from tether.store import MemoryStore, Store
from tether.tools.registry import Manifest, Registry, Risk

__all__ = [
    "AgentHarness",
    "PermissionLevel",
    "RegisteredAction",
    "RollbackCoordinator",
    "run_with_approval",
    "sandboxed_eval",
]


class PermissionLevel(Enum):
    """Seed 003's permission levels; each maps onto a tether risk tier."""

    READ = 1
    WRITE = 2
    ADMIN = 3
    IRREVERSIBLE = 4

    @property
    def risk(self) -> Risk:
        return Risk(self.name.lower())


@dataclass
class RegisteredAction:
    name: str
    level: PermissionLevel
    budget_cost: int
    description: str
    handler: Callable[..., Any]


class RollbackCoordinator:
    """Snapshots state around an operation; restores it if the operation raises."""

    def __init__(self) -> None:
        self._snapshots: list[dict[str, Any]] = []

    @contextmanager
    def transaction(self, state: dict[str, Any], op_name: str) -> Iterator[dict[str, Any]]:
        snapshot = copy.deepcopy(state)
        self._snapshots.append({"op": op_name, "snapshot": snapshot})
        try:
            yield state
        except Exception:
            state.clear()
            state.update(snapshot)
            self._snapshots.pop()
            raise

    def rollback_last(self, state: dict[str, Any]) -> str | None:
        """Undo the most recent committed operation; returns its name, or None if none."""
        if not self._snapshots:
            return None
        entry = self._snapshots.pop()
        state.clear()
        state.update(entry["snapshot"])
        op: str = entry["op"]
        return op


class _ActionRegistry:
    """The seed's registry view: names actions, refuses unknown ones."""

    def __init__(self, harness: AgentHarness) -> None:
        self._h = harness

    def register(self, action: RegisteredAction) -> None:
        self._h._register(action)

    def get(self, name: str) -> RegisteredAction:
        self._h.tools.get(name)  # raises the gate's UnknownToolError, a PermissionError
        return self._h._actions[name]

    def is_allowed(self, name: str) -> bool:
        return name in self._h.tools

    def names(self) -> list[str]:
        return self._h.tools.names()


class _AuditView:
    def __init__(self, store: Store) -> None:
        self._store = store

    def verify_integrity(self) -> bool:
        return self._store.verify_audit().intact

    def entries(self) -> list[dict[str, Any]]:
        return [e.record for e in self._store.audit_entries()]


_ANY_OBJECT = {"type": "object"}


class AgentHarness:
    """Seed 003's harness: execute registered actions through the gate, one run per harness."""

    HUMAN = "human"

    def __init__(
        self, budget: int = 100, *, store: Store | None = None, agent: str = "agent"
    ) -> None:
        self.tools = Registry()
        self.registry = _ActionRegistry(self)
        self.rollback = RollbackCoordinator()
        self._actions: dict[str, RegisteredAction] = {}
        self._state: dict[str, Any] = {}
        self._store = store or MemoryStore()
        self.audit = _AuditView(self._store)
        policy = Policy(
            version="harness-1",
            approvers=frozenset({self.HUMAN}),
            tiers=dict.fromkeys(Risk, Verdict.ALLOW),  # irreversible still asks, always
        )
        self.gate = Gate(self.tools, policy, self._store)
        self.run_id = self.gate.start_run(
            Principal(subject=agent, tenant="default"), budget=Budget(max_cost=budget)
        )
        self._ids = itertools.count(1)
        self._pending: dict[tuple[str, str], tuple[str, str]] = {}

    @property
    def budget(self) -> Budget:
        return self.gate.run_state(self.run_id).budget

    @property
    def state(self) -> dict[str, Any]:
        return self._state

    def _register(self, action: RegisteredAction) -> None:
        handler = action.handler
        manifest = Manifest(
            name=action.name,
            description=action.description,
            parameters=_ANY_OBJECT,
            risk=action.level.risk,
            cost=action.budget_cost,
        )
        self.tools.add(manifest, self._wrap(action, handler))
        self._actions[action.name] = action

    def _wrap(self, action: RegisteredAction, handler: Callable[..., Any]) -> Callable[..., Any]:
        takes_state = "state" in _parameters(handler)

        def run(**kwargs: Any) -> Any:
            if takes_state:
                kwargs["state"] = self._state
            if action.level in (PermissionLevel.WRITE, PermissionLevel.ADMIN):
                with self.rollback.transaction(self._state, action.name):
                    return handler(**kwargs)
            return handler(**kwargs)

        return run

    def execute(self, action_name: str, actor: str = "agent", **kwargs: Any) -> Any:
        """Run an action; raises ``HumanApprovalRequired`` for irreversible ones."""
        key = (action_name, digest(kwargs))
        call_id = f"call-{next(self._ids)}"
        try:
            return self.gate.call(
                self.run_id, ToolCall(call_id=call_id, tool=action_name, arguments=kwargs)
            ).result
        except ApprovalRequired as signal:
            self._pending[key] = (call_id, signal.approval_id)
            raise

    def approve_and_execute(self, action_name: str, actor: str = HUMAN, **kwargs: Any) -> Any:
        """After ``HumanApprovalRequired``: approve that exact call as ``actor`` and run it."""
        call_id, approval_id = self._take_pending(action_name, kwargs)
        self.gate.approve(approval_id, actor)
        return self.gate.call(
            self.run_id, ToolCall(call_id=call_id, tool=action_name, arguments=kwargs)
        ).result

    def reject(self, action_name: str, actor: str = HUMAN, reason: str = "", **kwargs: Any) -> None:
        """Refuse the pending call; it never runs and costs nothing."""
        _, approval_id = self._take_pending(action_name, kwargs)
        self.gate.deny(approval_id, actor, reason=reason or None)

    def _take_pending(self, action_name: str, kwargs: dict[str, Any]) -> tuple[str, str]:
        pending = self._pending.pop((action_name, digest(kwargs)), None)
        if pending is None:
            raise ConfigurationError(
                f"no pending approval for {action_name}({kwargs}); call execute() first — "
                "an approval covers only the exact call that asked for it"
            )
        return pending


def _parameters(fn: Callable[..., Any]) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def run_with_approval(
    model: Model,
    gate: Gate,
    run_id: str,
    user_input: str,
    *,
    approver: Approver,
    approver_id: str,
    system: str = "",
    max_steps: int = 8,
) -> RunResult:
    """Seed 004's loop: run to a final answer on an existing run, deciding approvals inline.

    ``run_id`` names a run made with ``Gate.start_run``; its conversation starts here."""
    runner = Runner(
        gate, model, system=system, max_turns=max_steps, approver=approver, approver_id=approver_id
    )
    runner.begin(run_id, user_input)
    return runner.resume(run_id)
