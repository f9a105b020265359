"""``tether mcp``: the MCP gateway (``pip install -e '.[mcp]'``).

    tether mcp init --config gateway.toml -- CMD ARGS   a config from a server's tools, pinned
    tether mcp pin --config gateway.toml       record each configured tool's digest
    tether mcp inspect --config gateway.toml   review every upstream tool before exposing it
    tether mcp serve --config gateway.toml     serve over stdio (or --http)

Loaded only when used (``tether --help`` does not import the MCP SDK)."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from tether.cli.common import JSON_OPTION, open_cli_store
from tether.cli.output import echo_json, note

if TYPE_CHECKING:
    from tether.mcp.config import GatewayConfig

CONFIG_OPTION = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The gateway config (gateway.toml); its lock file sits beside it.",
)
DB_OVERRIDE = click.option(
    "--db",
    "db",
    envvar="TETHER_DB",
    default=None,
    help="Store URL (default: the config's [gateway] db, else sqlite:///tether.db).",
)


def _load(config_path: str) -> GatewayConfig:
    try:
        from tether.mcp.config import load_config
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise click.ClickException(
            f"tether mcp needs the MCP SDK: pip install -e '.[mcp]' ({e})"
        ) from e
    return load_config(config_path)


@click.group()
def mcp() -> None:
    """The MCP gateway: govern any MCP server's tools (pin, inspect, serve)."""


@mcp.command("init")
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The gateway config to write (gateway.toml); its lock file is written beside it.",
)
@click.option("--server", "server_id", default="main", show_default=True, help="The server's id.")
@click.option("--url", default=None, help="A streamable-HTTP server's URL (instead of a command).")
@click.option(
    "--db",
    "db",
    default=None,
    help="The gateway's store (default: gateway.db beside the config).",
)
@click.option("--subject", default="desktop", show_default=True, help="Who calls over stdio.")
@click.option("--tenant", default="default", show_default=True, help="Their tenant.")
@click.option(
    "--approver",
    "approvers",
    multiple=True,
    help="Who may approve (repeat; default: your login name).",
)
@click.option("--force", is_flag=True, help="Overwrite an existing config and lock file.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def init_command(
    config_path: str,
    server_id: str,
    url: str | None,
    db: str | None,
    subject: str,
    tenant: str,
    approvers: tuple[str, ...],
    force: bool,
    command: tuple[str, ...],
) -> None:
    """Write a gateway config from a server's live tool list, and pin it.

    Give the server's command after --, or --url. Every tool gets a table whose risk is
    guessed from the server's hints and marked REVIEW; a tool that looks poisoned is
    written commented out. `tether mcp serve --config` takes the file as it is."""
    import getpass
    import os
    import tomllib
    from pathlib import Path

    import anyio

    from tether.mcp.config import ServerConfig, parse_config
    from tether.mcp.pins import Lock, write_lock
    from tether.mcp.review import pin, review
    from tether.mcp.scaffold import Scaffold, render

    path = Path(config_path).resolve()
    lock_path = path.with_name(path.stem + ".lock.json")
    if (bool(command)) == (url is not None):
        raise click.UsageError("give the server's command after --, or --url (one of them)")
    for existing in (path, lock_path):
        if existing.exists() and not force:
            raise click.ClickException(
                f"{existing} exists; tether mcp init does not overwrite it (--force to)"
            )
    server = ServerConfig(
        id=server_id,
        command=command[0] if command else None,
        args=tuple(command[1:]),
        url=url,
        tools={},
    )
    snapshots, name, version = anyio.run(_list_server, server)
    text = render(
        Scaffold(
            server_id=server_id,
            command=server.command,
            args=server.args,
            url=url,
            db=db or f"sqlite:///{path.with_name('gateway.db')}",
            subject=subject,
            tenant=tenant,
            approvers=approvers or (getpass.getuser(),),
            snapshots=snapshots,
            server_name=name,
            server_version=version,
        )
    )
    config = parse_config(tomllib.loads(text), path)  # what `serve` will read, checked first
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    rows = review(config, Lock({}), {server_id: snapshots})
    new, pinned, problems = pin(rows, Lock({}), accept=set(), now=time.time())
    write_lock(lock_path, new)
    offered = len(config.servers[server_id].tools)
    click.echo(f"wrote {path}: {offered} of {len(snapshots)} tool(s), risks guessed: REVIEW them")
    for key in pinned:
        click.echo(f"pinned {key} ({new.tools[key].digest})")
    for problem in problems:
        note(f"error: {problem}")
    left = len(snapshots) - offered
    if left:
        note(f"{left} tool(s) look poisoned and are commented out in {path.name}")
    click.echo(f"lock file: {lock_path}")
    click.echo(f"next: tether mcp inspect --config {path}; tether mcp serve --config {path}")


async def _list_server(server: Any) -> tuple[dict[str, dict[str, Any]], str | None, str | None]:
    from contextlib import AsyncExitStack

    from tether.mcp.pins import snapshot
    from tether.mcp.upstream import Upstream

    async with AsyncExitStack() as stack:
        upstream = Upstream(server, errlog=sys.stderr)
        await upstream.connect(stack)
        snaps = {
            n: snapshot(
                t,
                server_id=server.id,
                server_name=upstream.server_name,
                version=upstream.server_version,
            )
            for n, t in upstream.tools.items()
        }
        return snaps, upstream.server_name, upstream.server_version


@mcp.command("pin")
@CONFIG_OPTION
@JSON_OPTION
@click.option(
    "--accept",
    "accept",
    multiple=True,
    metavar="SERVER/TOOL",
    help="Pin this tool even though its text looks poisoned (you have reviewed it).",
)
def pin_command(config_path: str, as_json: bool, accept: tuple[str, ...]) -> None:
    """Connect to each upstream and pin its configured tools' digests in the lock file.

    A tool whose description carries instructions aimed at the model is not pinned (so not
    offered) unless --accept names it; the command then exits 1."""
    import anyio

    from tether.mcp.pins import read_lock, write_lock
    from tether.mcp.review import pin, review, survey

    config = _load(config_path)
    lock = read_lock(config.lock_path)
    found = anyio.run(survey, config, sys.stderr)
    rows = review(config, lock, {sid: snaps for sid, (_, snaps) in found.items()})
    new, pinned, problems = pin(rows, lock, accept=set(accept), now=time.time())
    write_lock(config.lock_path, new)
    if as_json:
        echo_json({"lock": str(config.lock_path), "pinned": pinned, "problems": problems})
    else:
        for key in pinned:
            click.echo(f"pinned {key} ({new.tools[key].digest})")
        for problem in problems:
            note(f"error: {problem}")
        click.echo(f"lock file: {config.lock_path}")
    if problems:
        sys.exit(1)


@mcp.command("inspect")
@CONFIG_OPTION
@JSON_OPTION
def inspect_command(config_path: str, as_json: bool) -> None:
    """List every upstream tool: offered or not, its tier, its pin status, what looks
    poisoned in it, and what the policy would do with a call to it."""
    import anyio

    from tether.mcp.pins import read_lock
    from tether.mcp.review import review, survey

    config = _load(config_path)
    lock = read_lock(config.lock_path)
    found = anyio.run(survey, config, sys.stderr)
    rows = review(config, lock, {sid: snaps for sid, (_, snaps) in found.items()})
    data = [row.to_dict(config.policy) for row in rows]
    if as_json:
        echo_json({"config": str(config.path), "lock": str(config.lock_path), "tools": data})
        return
    for sid, (upstream, _) in found.items():
        click.echo(
            f"server {sid}: {upstream.server_name or '?'} {upstream.server_version or ''} "
            f"({config.servers[sid].describe()})"
        )
    for row in data:
        click.echo(
            f"{row['tool']}" + (f" (offered as {row['offered_as']})" if row["offered_as"] else "")
        )
        click.echo(f"  pin      {row['pin']}")
        hints = row["annotations"] or {}
        if hints:
            said = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(hints.items()))
            click.echo(f"  hints    {said} (the server's say-so: may only make it stricter)")
        if row["risk"] is not None:
            raised = (
                f" (configured {row['configured_risk']}, raised by its annotations)"
                if row["risk"] != row["configured_risk"]
                else ""
            )
            click.echo(f"  risk     {row['risk']}{raised}")
            click.echo(f"  policy   {row['policy']}")
        for finding in row["findings"]:
            click.echo(f"  POISONED {finding}")


@mcp.command("serve")
@CONFIG_OPTION
@DB_OVERRIDE
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default=None, help="HTTP host (default: the config's, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="HTTP port (default: the config's, 8765).")
def serve_command(
    config_path: str, db: str | None, http: bool, host: str | None, port: int | None
) -> None:
    """Serve the configured, pinned tools through tether's gate: over stdio (the client
    starts this command; it acts for the config's [principal], or for the principal
    credential in $TETHER_PRINCIPAL_TOKEN), or with --http at http://HOST:PORT/mcp (each
    caller presents a principal credential as a bearer token)."""
    import os

    import anyio

    config = _load(config_path)
    url = db or config.db or "sqlite:///tether.db"

    async def main() -> None:
        from tether.identity import authenticate
        from tether.mcp.gateway import Gateway
        from tether.mcp.stdio import serve_stdio

        with open_cli_store(url) as store:
            token = os.environ.get("TETHER_PRINCIPAL_TOKEN")
            who = authenticate(store, token, "principal") if token and not http else None
            async with Gateway(config, store, errlog=sys.stderr, identity=who) as gateway:
                offered = ", ".join(sorted(gateway.offered)) or "none"
                if http:
                    from tether.mcp.http import serve_http

                    h, p = host or config.http_host, port or config.http_port
                    note(f"tether mcp: serving {offered} at http://{h}:{p}/mcp")
                    await serve_http(gateway, h, p)
                else:
                    note(f"tether mcp: serving {offered} over stdio")
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_drain_on_sigterm, gateway, tg.cancel_scope)
                        await serve_stdio(gateway)
                        tg.cancel_scope.cancel()

    anyio.run(main)


DRAIN_S = 30.0  # how long SIGTERM waits for calls in flight before the gateway exits


async def _drain_on_sigterm(gateway: Any, scope: Any) -> None:
    """On SIGTERM, let the calls in flight reach their recorded outcomes (at most
    ``DRAIN_S``), then stop serving."""
    import os
    import signal

    import anyio

    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            note(f"tether mcp: SIGTERM: finishing {gateway.in_flight} call(s) in flight")
            with anyio.move_on_after(DRAIN_S):
                await gateway.drained()
            # Every judged call has its outcome recorded (each is its own transaction):
            # end as SIGTERM always did. (Stopping the loop would wait on the thread that
            # reads stdin, which only the client's closing it ends.)
            scope.cancel()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
