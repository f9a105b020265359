"""What the gateway's tests share: configs for the test upstream and the published servers,
pinning, an in-process SDK client on a running gateway, an approver's credential."""

from __future__ import annotations

import os
import shutil
import sys
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tether.core.ledger import Effect
from tether.gate.desk import decide_approval
from tether.identity import add_identity, authenticate
from tether.mcp.config import GatewayConfig, load_config
from tether.mcp.gateway import Gateway
from tether.mcp.pins import read_lock, write_lock
from tether.mcp.review import pin, review, survey
from tether.store.base import Store
from tether.store.sqlite import SQLiteStore

UPSTREAM = Path(__file__).with_name("upstream_server.py")

# The test upstream's tools as an operator would configure them.
TEST_TOOLS: dict[str, str] = {
    "lookup": 'risk = "read"\ntenant_path = "tenant"',
    "save": 'risk = "write"\ntenant_path = "tenant"',
    "slow_save": 'risk = "write"\ntenant_scoped = false',
    "crash": 'risk = "write"\ntenant_scoped = false',
    "save_then_wait": 'risk = "write"\ntenant_scoped = false',
    "big": 'risk = "read"\ntenant_scoped = false\nmax_result_bytes = 1000',
    "fail": 'risk = "read"\ntenant_scoped = false',
    "profile": 'risk = "read"\ntenant_scoped = false\nsensitive_fields = ["api_key"]',
    "drop": 'risk = "read"\ntenant_scoped = false',  # its annotations make it irreversible
    "add": 'risk = "read"\ntenant_scoped = false',
    "mutate": 'risk = "read"\ntenant_scoped = false',
}


def policy_toml(approvers: str = '["alice"]', extra: str = "") -> str:
    return f'[policy]\nversion = "mcp-test-1"\napprovers = {approvers}\n{extra}'


def write_config(
    folder: Path,
    servers: str,
    *,
    principal: str = 'principal = { subject = "agent-1", tenant = "acme" }',
    policy: str | None = None,
) -> GatewayConfig:
    path = folder / "gateway.toml"
    path.write_text(f"{principal}\n{policy or policy_toml()}\n{servers}\n")
    return load_config(path)


def upstream_config(
    state: Path, tools: Mapping[str, str] = TEST_TOOLS, sid: str = "test", keys: str = ""
) -> str:
    """The test upstream's server table (``keys``: more of its keys, as TOML lines)."""
    lines = [
        f"[servers.{sid}]",
        f'command = "{sys.executable}"',
        f'args = ["{UPSTREAM.as_posix()}", "{state.as_posix()}"]',
        keys,
    ]
    for name, body in tools.items():
        lines += [f"[servers.{sid}.tools.{name}]", body]
    return "\n".join(lines)


async def pin_tools(
    config: GatewayConfig, accept: set[str] | None = None
) -> tuple[list[str], list[str]]:
    """``tether mcp pin``, in-process: what was pinned and the problems."""
    lock = read_lock(config.lock_path)
    with open(os.devnull, "w") as quiet:
        found = await survey(config, errlog=quiet)
    rows = review(config, lock, {sid: snaps for sid, (_, snaps) in found.items()})
    new, pinned, problems = pin(rows, lock, accept=accept or set(), now=time.time())
    write_lock(config.lock_path, new)
    return pinned, problems


@asynccontextmanager
async def connected(config: GatewayConfig, store: Store) -> AsyncIterator[tuple[Gateway, Client]]:
    """A gateway over the config's upstreams and the SDK's client on it, in-process."""
    with open(os.devnull, "w") as quiet:
        async with (
            Gateway(config, store, errlog=quiet) as gateway,
            Client(gateway.server(), raise_exceptions=True) as client,
        ):
            yield gateway, client


# Each approver's credential, per store (a name is registered once per store).
_TOKENS: weakref.WeakKeyDictionary[Store, dict[str, str]] = weakref.WeakKeyDictionary()


def approve(store: Store, approval_id: str, name: str = "alice", tenant: str = "acme") -> None:
    """An approver with a credential decides, as `tether approvals approve` does."""
    tokens = _TOKENS.setdefault(store, {})
    if name not in tokens:
        _, tokens[name] = add_identity(store, name, "approver", now=time.time(), tenants=[tenant])
    token = tokens[name]
    who = authenticate(store, token, "approver")
    decide_approval(store, approval_id, who, approve=True, now=time.time())


def text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def approval_id(result: Any) -> str:
    assert result.is_error, text(result)
    found: str = (result.meta or {})["io.tether/approval"]["approval_id"]
    return found


def witness(state: Path) -> list[str]:
    path = state / "witness.log"
    return path.read_text().splitlines() if path.exists() else []


def effect_of(db: str, tool: str) -> Effect | None:
    """The first effect of ``tool`` in the SQLite store at ``db`` (opened and closed here)."""
    store = SQLiteStore(db)
    try:
        found = [e for e in store.list_effects() if e.tool_name == tool]
        return found[0] if found else None
    finally:
        store.close()


def the_effect(db: str, tool: str) -> Effect:
    """``effect_of``, which must exist."""
    found = effect_of(db, tool)
    assert found is not None, f"no effect of {tool} in {db}"
    return found


def audit_kinds(store: Store) -> list[str]:
    return [entry.kind for entry in store.audit_entries()]


def required(tool: str, where: str) -> str:
    """A published server's executable: FAIL under CI when it is missing, skip elsewhere."""
    found = shutil.which(tool) if os.sep not in where else (where if Path(where).exists() else None)
    if found is None:
        missing(f"{tool} is not installed ({where}); .ci/run installs it")
    assert found is not None
    return found


def missing(message: str) -> None:
    """A published server the test needs is not there: under CI that fails the test."""
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
