"""The seeds' APIs (``AgentHarness``, ``run_with_approval``, ``RollbackCoordinator``...), kept
working as thin layers over tether's gate and runs."""

from tether.compat.seeds import (
    AgentHarness,
    PermissionLevel,
    RegisteredAction,
    RollbackCoordinator,
    run_with_approval,
    sandboxed_eval,
)

__all__ = [
    "AgentHarness",
    "PermissionLevel",
    "RegisteredAction",
    "RollbackCoordinator",
    "run_with_approval",
    "sandboxed_eval",
]
