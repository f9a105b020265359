"""The ``tether`` command.

Every command that reads state takes ``--db URL`` (or ``$TETHER_DB``). Errors go to stderr as
one sentence with a non-zero exit code: 1 for "the answer is no" (an audit that does not
verify), 2 for "could not do what was asked".
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from tether.errors import TetherError
from tether.store import Store, open_store

DB_OPTION = click.option(
    "--db",
    "db",
    envvar="TETHER_DB",
    default="sqlite:///tether.db",
    show_default=True,
    help="Store URL: sqlite:///path/to/file.db or memory://",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _open(db: str) -> Store:
    try:
        return open_store(db)
    except TetherError as e:
        raise click.ClickException(str(e)) from e


@click.group()
@click.version_option(package_name="tether")
def main() -> None:
    """tether: one governed, durable gate between an AI agent and its tools."""


@main.command()
@DB_OPTION
def demo(db: str) -> None:
    """Run the three seed scenarios and print their numbers (JSON on the last line)."""
    from tether.seeds import run_all

    with _open(db) as store:
        click.echo(f"tether demo on {store.url}")
        summary = run_all(store, click.echo)
    click.echo(json.dumps(summary, ensure_ascii=False, default=str))


@main.command()
@DB_OPTION
def migrate(db: str) -> None:
    """Create or upgrade the store's tables."""
    with _open(db) as store:
        version = getattr(store, "schema_version", None)
        click.echo(f"{store.url}: schema version {version}")


@main.group()
def audit() -> None:
    """Inspect the hash-chained audit log."""


@audit.command("verify")
@DB_OPTION
@JSON_OPTION
def audit_verify(db: str, as_json: bool) -> None:
    """Replay the hash chain; exit 1 and name the first bad entry if it does not verify."""
    with _open(db) as store:
        report = store.verify_audit()
    if as_json:
        click.echo(json.dumps(report.__dict__))
    elif report.intact:
        click.echo(report.summary())
    else:
        click.echo(report.summary(), err=True)
    sys.exit(0 if report.intact else 1)


@audit.command("head")
@DB_OPTION
def audit_head(db: str) -> None:
    """Print the chain's head; keep a copy elsewhere to detect a rewritten log later."""
    with _open(db) as store:
        head = store.audit_head()
    click.echo(json.dumps(None if head is None else {"seq": head.seq, "hash": head.hash}))


@main.group()
def effects() -> None:
    """Inspect the effect ledger."""


@effects.command("list")
@DB_OPTION
@JSON_OPTION
@click.option("--run", "run_id", default=None, help="Only this run's effects.")
def effects_list(db: str, as_json: bool, run_id: str | None) -> None:
    """List recorded effects, oldest first."""
    with _open(db) as store:
        rows = [e.to_dict() for e in store.list_effects(run_id)]
    for row in rows:
        row.pop("result_json", None)
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        click.echo("no effects recorded")
    for r in rows:
        ref = f" ref={r['external_reference']}" if r["external_reference"] else ""
        click.echo(f"{r['status']:<21} {r['operation_key']}{ref}")


def run() -> Any:
    try:
        return main(standalone_mode=True)
    except TetherError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
