"""What every ``tether`` subcommand shares: the ``--db`` and ``--json`` options and opening
the store they name.

Nothing heavy is imported here at module level: every command module imports this one, and
``tether --help`` should not pay for the store's backends to list the commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from tether.evidence.keys import AuditKeys
    from tether.store import Store

DB_OPTION = click.option(
    "--db",
    "db",
    envvar="TETHER_DB",
    default="sqlite:///tether.db",
    show_default=True,
    show_envvar=True,
    help="Store URL: sqlite:///path/to/file.db, postgresql://… or memory://",
)
JSON_OPTION = click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document (and nothing else) on stdout."
)

# Exit codes of commands that check something: intact, not intact, could not check.
EXIT_OK, EXIT_NOT_INTACT, EXIT_CANNOT_CHECK = 0, 1, 2


class StoreUnavailable(click.ClickException):
    """The store could not be opened (missing, malformed URL, unreachable, key lost)."""

    exit_code = EXIT_CANNOT_CHECK


def open_cli_store(
    db: str, *, create: bool = True, read_only: bool = False, keys: AuditKeys | None = None
) -> Store:
    """The store ``--db`` names. ``create=False`` for commands that must not make one where
    a typo pointed; ``read_only=True`` for commands that only look (no migration, no write).
    Exits 2 with one sentence if it cannot be opened."""
    from tether.errors import TetherError
    from tether.store import open_store

    try:
        return open_store(db, create=create, read_only=read_only, keys=keys)
    except TetherError as e:
        raise StoreUnavailable(str(e)) from e
