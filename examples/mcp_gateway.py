"""An MCP client governed by the tether gateway, with no change to the client: a read runs,
a write waits for an approver's credential, and the same call, once approved, runs once.

Run it with `python examples/mcp_gateway.py`. It starts a small notes server (this file,
run as `... upstream DIR`), pins its tools, serves them through `tether mcp serve` over
stdio and drives that with the MCP SDK's client; everything lives in a temporary directory.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio


def upstream(folder: Path) -> None:
    """The upstream MCP server: notes in a folder, each write logged to a witness file."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("notes")

    @server.tool(structured_output=False)
    def read_note(name: str) -> str:
        """Read the note called NAME."""
        return (folder / name).read_text()

    @server.tool(structured_output=False)
    def write_note(name: str, text: str) -> str:
        """Write TEXT to the note called NAME."""
        (folder / name).write_text(text)
        with (folder.parent / "writes.log").open("a") as f:
            f.write(name + "\n")
        return f"saved {name}"

    server.run("stdio")


CONFIG = """
principal = {{ subject = "desktop-agent", tenant = "acme" }}
policy = {{ version = "notes-1", approvers = ["alice"] }}
[gateway]
db = "sqlite:///{tmp}/tether.db"
[servers.notes]
command = "{python}"
args = ["{script}", "upstream", "{tmp}/notes"]
[servers.notes.tools.read_note]
risk = "read"
[servers.notes.tools.write_note]
risk = "write"
"""


async def agent(tmp: Path, env: dict[str, str]) -> int:
    from mcp import Client, StdioServerParameters

    tether = [sys.executable, "-m", "tether"]
    gateway = StdioServerParameters(
        command=tether[0], args=[*tether[1:], "mcp", "serve", "--config", str(tmp / "gw.toml")]
    )
    async with Client(gateway) as client:
        print("offered:", sorted(t.name for t in (await client.list_tools()).tools))
        read = await client.call_tool("read_note", {"name": "todo"})
        print("read:", read.content[0].text)  # type: ignore[union-attr]
        args = {"name": "todo", "text": "ship on Friday"}
        asked = await client.call_tool("write_note", args)
        approval = (asked.meta or {})["io.tether/approval"]["approval_id"]
        print("write:", asked.content[0].text.split(".")[0])  # type: ignore[union-attr]
        # Naming an approver is an administrator's decision: the store's first admin first.
        admin = subprocess.check_output([*tether, "admins", "add", "root"], env=env, text=True)
        add = [*tether, "approvers", "add", "alice", "--tenant", "acme"]
        as_admin = {**env, "TETHER_ADMIN_TOKEN": admin.strip().splitlines()[-1]}
        token = subprocess.check_output(add, env=as_admin, text=True).strip().splitlines()[-1]
        decide = [*tether, "approvals", "approve", approval]
        subprocess.run(decide, env={**env, "TETHER_APPROVER_TOKEN": token}, check=True)
        done = await client.call_tool("write_note", args)
        print("after approval:", done.content[0].text)  # type: ignore[union-attr]
        again = await client.call_tool("write_note", args)  # a new call: asks again
        print("a second write asks again:", again.is_error)
    return len((tmp / "writes.log").read_text().splitlines())


def main() -> None:
    with tempfile.TemporaryDirectory() as workdir:
        tmp = Path(workdir)
        (tmp / "notes").mkdir()
        (tmp / "notes" / "todo").write_text("ship the release notes")
        fill = {"tmp": tmp.as_posix(), "python": sys.executable, "script": __file__}
        (tmp / "gw.toml").write_text(CONFIG.format(**fill))
        env = {**os.environ, "TETHER_DB": f"sqlite:///{tmp}/tether.db"}
        pin = [sys.executable, "-m", "tether", "mcp", "pin", "--config", str(tmp / "gw.toml")]
        print(subprocess.check_output(pin, env=env, text=True).splitlines()[0])
        executions = anyio.run(agent, tmp, env)
        print(json.dumps({"executions": executions, "expected": 1, "framework": "mcp"}))


if __name__ == "__main__":
    upstream(Path(sys.argv[2])) if sys.argv[1:2] == ["upstream"] else main()
