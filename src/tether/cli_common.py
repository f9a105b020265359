"""What every ``tether`` subcommand shares: the ``--db`` and ``--json`` options and opening
the store they name."""

from __future__ import annotations

import click

from tether.errors import TetherError
from tether.store import Store, open_store

DB_OPTION = click.option(
    "--db",
    "db",
    envvar="TETHER_DB",
    default="sqlite:///tether.db",
    show_default=True,
    help="Store URL: sqlite:///path/to/file.db, postgresql://… or memory://",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def open_cli_store(db: str) -> Store:
    try:
        return open_store(db)
    except TetherError as e:
        raise click.ClickException(str(e)) from e
