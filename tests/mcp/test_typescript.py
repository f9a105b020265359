"""The official TypeScript SDK client (@modelcontextprotocol/sdk from npm, installed by
.ci/run) drives the gateway over stdio and over streamable HTTP: it lists the tools, makes
an allowed call and a call that asks for approval; the approval is decided from another
process (`tether approvals approve`), and the call sent again runs, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.mcp.helpers import pin_tools, required, upstream_config, witness, write_config
from tests.mcp.test_serve import free_port, listening, serve, stop
from tether.identity import add_identity
from tether.store import SQLiteStore

PREFIX = Path(os.environ.get("TETHER_NPM_PREFIX", Path.home() / ".cache/tether/npm"))
SDK = PREFIX / "node_modules/@modelcontextprotocol/sdk/package.json"
CLIENT = Path(__file__).with_name("ts_client.mjs")


def steps(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)


def drive(
    tmp_path: Path, db: str, state: Path, argv: list[str], env: dict[str, str]
) -> dict[str, Any]:
    """Run the TypeScript client; approve its asked call from a `tether` process."""
    required("node", "node")
    required("@modelcontextprotocol/sdk", str(SDK))
    store = SQLiteStore(db)
    _, alice = add_identity(store, "alice", "approver", now=time.time(), tenants=["acme"])
    store.close()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.Popen(
        ["node", str(CLIENT), *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean, "TETHER_NPM_PREFIX": str(PREFIX), **env},
    )
    seen: dict[str, Any] = {}
    try:
        for step in steps(proc):
            seen[step["step"]] = step["value"]
            if step["step"] == "asked":
                approval = step["value"]["_meta"]["io.tether/approval"]["approval_id"]
                assert witness(state) == []  # nothing ran yet
                approved = subprocess.run(
                    [sys.executable, "-m", "tether", "approvals", "approve", approval],
                    env={**clean, "TETHER_DB": db, "TETHER_APPROVER_TOKEN": alice},
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                assert approved.returncode == 0, approved.stderr
                assert proc.stdin is not None
                proc.stdin.write("approved\n")
                proc.stdin.flush()
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)
    return seen


def check(seen: dict[str, Any], state: Path) -> None:
    assert "lookup" in seen["list"] and "save" in seen["list"], seen["list"]
    assert seen["read"]["content"][0]["text"] == "acme:k=value", seen["read"]
    assert seen["asked"]["isError"] is True
    resent = seen["resent"]
    assert resent.get("isError") is not True, resent
    assert resent["content"][0]["text"] == "saved k", resent
    assert witness(state) == ["save k v"]  # once


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, str]:
    state = tmp_path / "upstream"
    state.mkdir()
    config = write_config(tmp_path, upstream_config(state))
    anyio.run(pin_tools, config)
    return config.path, state, f"sqlite:///{tmp_path}/gateway.db"


def test_the_typescript_client_over_stdio(tmp_path: Path, setup: tuple[Path, Path, str]) -> None:
    config, state, db = setup
    seen = drive(tmp_path, db, state, ["stdio", sys.executable, str(config)], {"TETHER_DB": db})
    check(seen, state)


def test_the_typescript_client_over_streamable_http(
    tmp_path: Path, setup: tuple[Path, Path, str]
) -> None:
    from tether.mcp.config import load_config

    config, state, db = setup
    store = SQLiteStore(db)
    _, token = add_identity(store, "agent-ts", "principal", now=time.time(), tenants=["acme"])
    store.close()
    port = free_port()
    gateway = serve(load_config(config), db, "--http", "--port", str(port))
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        listening(gateway, url)
        seen = drive(tmp_path, db, state, ["http", url, token], {})
    finally:
        stop(gateway)
    check(seen, state)
