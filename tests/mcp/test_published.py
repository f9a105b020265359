"""The gateway in front of published MCP servers, installed by the test set-up (.ci/run):
the reference filesystem server from npm, pointed only at a temporary folder, and
mcp-server-git from PyPI on a temporary repository. Under CI a missing server fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.mcp.helpers import (
    approval_id,
    approve,
    audit_kinds,
    connected,
    missing,
    pin_tools,
    policy_toml,
    required,
    text,
    write_config,
)
from tether.core.digest import canonical_json, sha256_hex
from tether.core.ledger import EffectStatus
from tether.mcp.config import GatewayConfig
from tether.store import SQLiteStore

FILESYSTEM = os.environ.get(
    "TETHER_MCP_FILESYSTEM",
    str(
        Path.home()
        / ".cache/tether/npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    ),
)


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(f"sqlite:///{tmp_path}/gateway.db")


# -- the filesystem server ---------------------------------------------------------------------
def filesystem_config(tmp_path: Path, folder: Path) -> GatewayConfig:
    required("node", "node")
    script = required("server-filesystem", FILESYSTEM)
    inside = f"^{folder.as_posix()}/(?!.*\\.\\.)"  # in the folder, no way out with '..'
    rules = "\n".join(
        f'[policy.tools.{tool}]\nconstraints = [{{ argument = "path", op = "matches", '
        f"value = '{inside}.*' }}]"
        for tool in ("read_text_file", "write_file")
    )
    servers = f"""
[servers.fs]
command = "node"
args = ["{script}", "{folder.as_posix()}"]
[servers.fs.tools.read_text_file]
risk = "read"
tenant_scoped = false
[servers.fs.tools.write_file]
risk = "write"
tenant_scoped = false
[servers.fs.tools.list_directory]
risk = "read"
tenant_scoped = false
"""
    return write_config(tmp_path, servers, policy=policy_toml(extra=rules))


def test_filesystem_read_write_and_a_path_outside_the_folder(
    tmp_path: Path, store: SQLiteStore
) -> None:
    folder = (tmp_path / "files").resolve()
    folder.mkdir()
    (folder / "a.txt").write_text("alpha")
    config = filesystem_config(tmp_path, folder)
    target = folder / "b.txt"
    args = {"path": str(target), "content": "beta"}

    async def scenario() -> None:
        pinned, problems = await pin_tools(config)
        assert sorted(pinned) == ["fs/list_directory", "fs/read_text_file", "fs/write_file"]
        assert not problems
        async with connected(config, store) as (gateway, client):
            # write_file says it is destructive: the gate treats it as irreversible.
            assert gateway.offered["write_file"].manifest.risk.value == "irreversible"
            read = await client.call_tool("read_text_file", {"path": str(folder / "a.txt")})
            # Passed through unchanged: the server's text, and its structured content.
            assert not read.is_error and text(read) == "alpha"
            assert read.structured_content == {"content": "alpha"}
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed["read_text_file"].output_schema is not None
            asked = await client.call_tool("write_file", args)
            approval = approval_id(asked)
            assert not target.exists()
            approve(store, approval)
            done = await client.call_tool("write_file", args)
            assert not done.is_error, text(done)
            assert target.read_text() == "beta"
            target.write_text("changed by someone else")
            again = await client.call_tool("write_file", args)  # a new call: asks again
            assert approval_id(again) != approval
            for outside in ("/etc/hostname", f"{folder}/../secret.txt"):
                refused = await client.call_tool("read_text_file", {"path": outside})
                assert refused.is_error and "breaks" in text(refused), text(refused)

    anyio.run(scenario)
    assert target.read_text() == "changed by someone else"  # written once, not twice
    effects = [e for e in store.list_effects() if e.tool_name == "write_file"]
    assert [e.status for e in effects] == [EffectStatus.COMMITTED]
    kinds = audit_kinds(store)
    for kind in ("approval_requested", "approval_granted", "tool_effect_resolved"):
        assert kind in kinds
    assert kinds.count("call_denied") == 2


# -- the git server ----------------------------------------------------------------------------
def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def test_git_status_and_an_approved_commit_made_once(tmp_path: Path, store: SQLiteStore) -> None:
    try:
        import mcp_server_git  # noqa: F401
    except ImportError:
        missing("mcp-server-git is not installed (it is in the dev extra)")
    repo = (tmp_path / "repo").resolve()
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "Dev")
    (repo / "README").write_text("hello\n")
    git(repo, "add", "README")
    git(repo, "commit", "-qm", "first")
    rules = (
        '[policy.tools.git_commit]\nconstraints = [{ argument = "repo_path", op = "==", '
        f'value = "{repo.as_posix()}" }}]\n'
        '[policy.tools.git_status]\nconstraints = [{ argument = "repo_path", op = "==", '
        f'value = "{repo.as_posix()}" }}]'
    )
    servers = f"""
[servers.git]
command = "{sys.executable}"
args = ["-m", "mcp_server_git", "--repository", "{repo.as_posix()}"]
[servers.git.tools.git_status]
risk = "read"
tenant_scoped = false
[servers.git.tools.git_add]
risk = "write"
tenant_scoped = false
[servers.git.tools.git_commit]
risk = "write"
tenant_scoped = false
"""
    config = write_config(tmp_path, servers, policy=policy_toml(extra=rules))
    commit = {"repo_path": str(repo), "message": "second"}

    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            (repo / "notes.txt").write_text("notes\n")
            status = await client.call_tool("git_status", {"repo_path": str(repo)})
            assert not status.is_error and "notes.txt" in text(status)
            add = {"repo_path": str(repo), "files": ["notes.txt"]}
            approve(store, approval_id(await client.call_tool("git_add", add)))
            assert not (await client.call_tool("git_add", add)).is_error
            approve(store, approval_id(await client.call_tool("git_commit", commit)))
            done = await client.call_tool("git_commit", commit)
            assert not done.is_error and "Changes committed" in text(done), text(done)
            again = await client.call_tool("git_commit", commit)
            assert again.is_error and "approval" in text(again)
            other = await client.call_tool("git_status", {"repo_path": str(tmp_path)})
            assert other.is_error and "breaks" in text(other)

    anyio.run(scenario)
    assert git(repo, "log", "--format=%s").split() == ["second", "first"]
    effects = [e for e in store.list_effects() if e.tool_name == "git_commit"]
    assert [e.status for e in effects] == [EffectStatus.COMMITTED]


def test_a_large_file_read_is_capped_in_the_ledger_with_the_digest_of_the_whole(
    tmp_path: Path, store: SQLiteStore
) -> None:
    folder = (tmp_path / "files").resolve()
    folder.mkdir()
    big = folder / "big.txt"
    big.write_text("".join(f"line {i:07d} of a large file\n" for i in range(150_000)))  # ~4 MB
    config = filesystem_config(tmp_path, folder)
    script = required("server-filesystem", FILESYSTEM)

    async def direct() -> dict[str, object]:
        params = StdioServerParameters(command="node", args=[script, str(folder)])
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                got = await s.call_tool("read_text_file", {"path": str(big)})
        blocks = [b.model_dump(by_alias=True, exclude_none=True) for b in got.content]
        return {"content": blocks, "structuredContent": got.structured_content}

    async def scenario() -> None:
        await pin_tools(config)
        async with connected(config, store) as (_, client):
            read = await client.call_tool("read_text_file", {"path": str(big)})
            # The SDK client validated it against the tool's output schema: still its shape.
            assert not read.is_error, text(read)
            capped = (read.meta or {})["io.tether/capped"]
            whole = canonical_json(await direct())
            assert capped["bytes"] == len(whole.encode()) > 4_000_000
            assert capped["sha256"] == "sha256:" + sha256_hex(whole)
            assert "result capped" in text(read) and text(read).startswith("line 0000000")
            assert len(text(read).encode()) < 65_536
            content = (read.structured_content or {})["content"]
            assert isinstance(content, str) and 0 < len(content) < 65_536
            again = await client.call_tool("read_text_file", {"path": str(big)})
            assert (again.meta or {})["io.tether/capped"] == capped  # a new read, same digest

    anyio.run(scenario)
    reads = [e for e in store.list_effects() if e.tool_name == "read_text_file"]
    assert len(reads) == 2
    assert all(len(e.result_json or "") < 65_536 for e in reads)  # not stored whole
