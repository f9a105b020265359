"""``tether audit``: verify the audit log, print its head."""

from __future__ import annotations

import json
import sys

import click

from tether.cli_common import DB_OPTION, JSON_OPTION, open_cli_store


@click.group()
def audit() -> None:
    """Inspect the hash-chained audit log."""


@audit.command("verify")
@DB_OPTION
@JSON_OPTION
def audit_verify(db: str, as_json: bool) -> None:
    """Replay the hash chain; exit 1 and name the first bad entry if it does not verify."""
    with open_cli_store(db) as store:
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
    """Print each chain's head; keep a copy elsewhere to detect a rewritten log later."""
    with open_cli_store(db) as store:
        heads = store.audit_heads()
    click.echo(json.dumps({c: {"seq": h.seq, "hash": h.hash} for c, h in sorted(heads.items())}))
