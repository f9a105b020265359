"""The README's gateway section, command by command, as a new operator runs it: `tether mcp
init` writes and pins a config from the published filesystem server's live tool list (and
will not overwrite it without --force); the administrator, the approver and a principal are
added to the gateway's own store (TETHER_DB = the config's db); the official SDK client,
over stdio, reads, asks to write, and after `tether approvals approve` from another process
the resent write runs once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.mcp.helpers import UPSTREAM, approval_id, connected, required, text, witness
from tests.mcp.test_published import FILESYSTEM
from tether.mcp.config import load_config
from tether.store import SQLiteStore


def tether(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
        check=False,
    )


def credential(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_init_then_the_readme_commands_on_the_gateways_own_store(tmp_path: Path) -> None:
    required("node", "node")
    script = required("server-filesystem", FILESYSTEM)
    notes = (tmp_path / "notes").resolve()
    notes.mkdir()
    (notes / "a.txt").write_text("alpha")
    gw = tmp_path / "gw"
    init = [
        "mcp", "init", "--config", "gw/gateway.toml", "--server", "fs", "--tenant", "acme",
        "--approver", "alice", "--", "node", script, str(notes),
    ]  # fmt: skip
    made = tether(*init, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "pinned fs/read_text_file (sha256:" in made.stdout
    written = (gw / "gateway.toml").read_text()
    assert "REVIEW" in written and (gw / "gateway.lock.json").exists()
    raw = tomllib.loads(written)
    tools = raw["servers"]["fs"]["tools"]
    assert tools["read_text_file"]["risk"] == "read"  # the server says readOnlyHint
    assert tools["write_file"]["risk"] == "irreversible"  # the server says destructiveHint
    assert tools["create_directory"]["risk"] == "write"
    before = written

    again = tether(*init, cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr, again.stderr
    assert (gw / "gateway.toml").read_text() == before  # not overwritten
    forced = tether(*init[:-4], "--force", *init[-4:], cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr

    config = load_config(gw / "gateway.toml")  # what `tether mcp serve` reads
    assert config.db == f"sqlite:///{gw.resolve()}/gateway.db"
    db = {"TETHER_DB": config.db}
    inspected = tether("mcp", "inspect", "--config", "gw/gateway.toml", cwd=tmp_path)
    assert inspected.returncode == 0 and "pin      pinned" in inspected.stdout

    # The README's lines, against the gateway's store.
    admin = credential(tether("admins", "add", "root", cwd=tmp_path, **db))
    as_admin = {**db, "TETHER_ADMIN_TOKEN": admin}
    alice = credential(
        tether("approvers", "add", "alice", "--tenant", "acme", cwd=tmp_path, **as_admin)
    )
    add_principal = ("principals", "add", "agent-7", "--tenant", "acme", "--scopes", "")
    agent = credential(tether(*add_principal, cwd=tmp_path, **as_admin))
    assert agent.startswith("tth_") and alice.startswith("tth_")
    assert not (tmp_path / "tether.db").exists()  # nothing landed in ./tether.db

    target = notes / "b.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}

    async def session() -> None:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "tether", "mcp", "serve", "--config", str(gw / "gateway.toml")],
            env={**env, "TETHER_PRINCIPAL_TOKEN": agent},
            cwd=str(tmp_path),
        )
        with open(os.devnull, "w") as quiet:
            async with (
                stdio_client(params, errlog=quiet) as (r, w),
                ClientSession(r, w) as s,
            ):
                await s.initialize()
                names = {t.name for t in (await s.list_tools()).tools}
                assert {"read_text_file", "write_file"} <= names
                read = await s.call_tool("read_text_file", {"path": str(notes / "a.txt")})
                assert not read.is_error and text(read) == "alpha", text(read)
                write: dict[str, Any] = {"path": str(target), "content": "beta"}
                asked = await s.call_tool("write_file", write)
                approval = approval_id(asked)
                assert not target.exists()
                approved = await anyio.to_thread.run_sync(
                    lambda: tether(
                        "approvals",
                        "approve",
                        approval,
                        cwd=tmp_path,
                        **db,
                        TETHER_APPROVER_TOKEN=alice,
                    )
                )
                assert approved.returncode == 0, approved.stderr
                done = await s.call_tool("write_file", write)
                assert not done.is_error, text(done)
                replay = await s.call_tool("write_file", write)  # a new call: asks again
                assert replay.is_error and approval_id(replay) != approval

    anyio.run(session)
    assert target.read_text() == "beta"
    store = SQLiteStore(config.db or "")
    try:
        writes = [e for e in store.list_effects() if e.tool_name == "write_file"]
        assert [e.status.value for e in writes] == ["committed"]
        runs = {e.run_id for e in writes}
        with store.read() as tx:
            [run] = [tx.get_run(r) for r in runs]
        assert run is not None and run.principal_id == "agent-7"  # the credential's principal
    finally:
        store.close()


def test_init_comments_out_a_poisoned_tool_and_scopes_tenant_arguments(tmp_path: Path) -> None:
    state = tmp_path / "upstream"
    state.mkdir()
    made = tether(
        "mcp", "init", "--config", "gateway.toml", "--server", "test", "--approver", "alice",
        "--", sys.executable, str(UPSTREAM), str(state),
        cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "look poisoned" in made.stderr
    written = (tmp_path / "gateway.toml").read_text()
    assert "# NOT OFFERED: 'add' looks poisoned" in written
    tools = tomllib.loads(written)["servers"]["test"]["tools"]
    assert "add" not in tools  # commented out: offering it is a decision after reading it
    assert tools["lookup"] == {"risk": "read", "tenant_path": "tenant"}
    assert tools["save"] == {"risk": "write", "tenant_path": "tenant"}  # no hints: a write
    assert tools["drop"]["risk"] == "irreversible"
    config = load_config(tmp_path / "gateway.toml")
    lock = json.loads(config.lock_path.read_text())
    assert sorted(lock["tools"]) == sorted(f"test/{t}" for t in tools)
    # The scaffold is one `serve` takes as it is: the pinned tools are offered.
    store = SQLiteStore(config.db or "")

    async def offered() -> list[str]:
        async with connected(config, store) as (_, client):
            return sorted(t.name for t in (await client.list_tools()).tools)

    try:
        assert anyio.run(offered) == sorted(tools)
    finally:
        store.close()
    assert witness(state) == []
