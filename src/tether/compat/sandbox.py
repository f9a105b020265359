"""Seed 003's ``sandboxed_eval`` on pydantic-monty.

Monty runs Python in a separate worker process with its own interpreter written in Rust: no
file system, network or host imports unless the host grants them, and hard limits on time and
memory enforced by the worker. We chose it over RestrictedPython (same process, no time or
memory limits) and simpleeval (expressions only, no memory limit) because a sandbox that can
be made to loop forever or eat the host's memory is not a sandbox.

Monty is an optional extra (``pip install -e '.[sandbox]'``), imported on the first
evaluation: a gate that never runs untrusted code neither installs nor loads it.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any

from tether.errors import SandboxError

_pool: Any = None
_lock = threading.Lock()


def _monty() -> Any:
    try:
        import pydantic_monty
    except ImportError as e:
        # An ImportError, as every optional integration's (tether.models.openai...) is.
        raise ImportError(
            "tether.compat.sandbox needs the pydantic-monty package, which is not installed: "
            "pip install -e '.[sandbox]'"
        ) from e
    return pydantic_monty


def _workers(monty: Any) -> Any:
    global _pool
    with _lock:
        if _pool is None:
            _pool = monty.Monty()
            _pool.__enter__()
            atexit.register(_shutdown)
        return _pool


def _shutdown() -> None:
    global _pool
    with _lock:
        if _pool is not None:
            _pool.__exit__(None, None, None)
            _pool = None


def sandboxed_eval(
    code: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    time_limit_s: float = 1.0,
    memory_limit_bytes: int = 16 * 1024 * 1024,
) -> Any:
    """Evaluate ``code`` (an expression, or statements ending in one) in the sandbox."""
    monty = _monty()
    limits = monty.ResourceLimits(
        max_feed_duration_secs=time_limit_s, max_memory=memory_limit_bytes
    )
    try:
        with _workers(monty).checkout(limits=limits) as session:
            return session.feed_run(code, inputs=dict(inputs or {}))
    except monty.MontyError as e:
        raise SandboxError(f"sandboxed code failed: {e}") from e
