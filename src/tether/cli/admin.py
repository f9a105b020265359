"""Setting up and trying out: ``tether demo``, ``tether migrate``, ``tether debug``."""

from __future__ import annotations

import click

from tether.cli.common import DB_OPTION, JSON_OPTION
from tether.cli.output import echo_json, note
from tether.cli.shared import open_store, operator


@click.command()
@DB_OPTION
@JSON_OPTION
def demo(db: str, as_json: bool) -> None:
    """Run the three seed scenarios and print what happened (their numbers with --json)."""
    from tether.demo.seeds import run_all

    # With --json the story still goes to the terminal, on stderr: stdout is the numbers.
    say = note if as_json else click.echo
    with open_store(db, create=True) as store:
        say(f"tether demo on {store.url}")
        summary = run_all(store, say)
    if as_json:
        echo_json(summary)


@click.command()
@DB_OPTION
@click.option(
    "--trust-unkeyed-log",
    is_flag=True,
    help="Authenticate audit entries that carry no MAC, and seal the runs and credentials as "
    "they stand: only for a store made before audit keys (a stripped log looks the same).",
)
@click.option(
    "--seal-credentials",
    is_flag=True,
    help="Seal credential rows that have none (made before credentials were sealed); each "
    "is listed in the audit log as the key holder's word.",
)
def migrate(db: str, trust_unkeyed_log: bool, seal_credentials: bool) -> None:
    """Create or upgrade the store's tables (and, when told, adopt what predates keys)."""
    from tether.store import keying

    with open_store(db, create=True) as store:
        version = getattr(store, "schema_version", None)
        click.echo(f"{store.url}: schema version {version}")
        if trust_unkeyed_log:
            count = keying.trust_unkeyed_log(store)
            click.echo(f"authenticated {count} audit entries that had no MAC (trust on first use)")
        if seal_credentials:
            for c in keying.seal_credentials(store, actor=operator()):
                click.echo(f"sealed {c['kind']} {c['name']} ({c['credential_id']})")


@click.group()
def debug() -> None:
    """Tools for testing tether itself."""


@debug.command("crash-points")
def debug_crash_points() -> None:
    """List the named crash points (arm one with TETHER_CRASH_AT=name[:n])."""
    from tether.crash import POINTS

    for name, what in POINTS.items():
        click.echo(f"{name:<30} {what}")
