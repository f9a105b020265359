"""The ``tether`` command.

Every command that reads state takes ``--db URL`` (or ``$TETHER_DB``). Commands that only read,
or that act on what a store already holds (deciding approvals, resuming, resolving,
recovering, rolling back), never create one: a typo in a URL is an error, not a new empty
database. ``run``, ``worker``, ``demo``, ``migrate`` and the ``add`` commands create it.

Who acts is authenticated, never typed (invariant I9): approvers present the credential that
``tether approvers add`` made (``$TETHER_APPROVER_TOKEN`` or ``--token-file``), and a run acts
for the app's principal or for a principal credential (``$TETHER_PRINCIPAL_TOKEN``).

Errors go to stderr as one sentence. Exit codes:

    0    done
    1    the answer is no (``tether audit verify``: the log does not verify)
    2    could not do what was asked: bad or contradictory input, a missing store, an unknown
         run, approval or effect, a refused credential, a refused decision
    130  interrupted
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from tether.cli.admin import debug, demo, migrate
from tether.cli.approvals import approvals
from tether.cli.effects import effects
from tether.cli.identities import admins, approvers, principals
from tether.cli.runs import recover_command, run_command, runs, worker_command

# Command groups defined elsewhere, loaded only when used: ``tether.cli.audit`` imports the
# audit and checkpoint machinery (and through it most of tether), which ``tether --help``
# has no need for. name -> (module, attribute, the line ``tether --help`` shows for it).
LAZY: dict[str, tuple[str, str, str]] = {
    "audit": ("tether.cli.audit", "audit", "Inspect the hash-chained audit log."),
    "serve": ("tether.cli.serve", "serve", "Serve the approval inbox: pages and a JSON API."),
    "notify": ("tether.cli.serve", "notify", "Deliver approval notifications to webhooks."),
    "mcp": ("tether.cli.mcp", "mcp", "The MCP gateway: govern any MCP server's tools."),
}


class Root(click.Group):
    """The ``tether`` group: its own commands, and the lazily loaded ones of ``LAZY``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY and cmd_name not in self.commands:
            module, attribute, _ = LAZY[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{module}.{attribute} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Like click's, with the lazy commands described without importing them."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in LAZY and name not in self.commands:
                rows.append((name, LAZY[name][2]))
                continue
            command = self.commands[name]
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=Root)
@click.version_option(package_name="tether-gate")
def main() -> None:
    """tether: one governed, durable gate between an AI agent and its tools."""


for _command in (
    demo,
    migrate,
    admins,
    approvers,
    principals,
    effects,
    run_command,
    worker_command,
    runs,
    approvals,
    recover_command,
    debug,
):
    main.add_command(_command)


def run() -> None:
    """The console entry point: every failure ends as one sentence and an exit code."""
    from tether.crash import ENV as CRASH_ENV
    from tether.crash import validate as validate_crash_point

    armed = os.environ.get(CRASH_ENV)
    if armed:
        try:
            validate_crash_point(armed)
        except ValueError as e:
            click.echo(f"error: {CRASH_ENV}: {e}", err=True)
            sys.exit(2)
    garbled = not_text(sys.argv[1:])
    if garbled is not None:
        # Python hands undecodable bytes over as lone surrogates, which no store, log or
        # terminal can hold: refused here, before any command sees them.
        click.echo(
            f"error: argument {garbled} is not UTF-8 text; pass ids and names as typed", err=True
        )
        sys.exit(2)
    try:
        code = main(standalone_mode=False)
    except click.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.UsageError as e:
        e.show()  # with the usage line: the command itself was wrong
        sys.exit(2)
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)  # a store that cannot be opened
        sys.exit(2)
    except ModuleNotFoundError as e:
        from tether.errors import MissingExtra
        from tether.extras import extra_for

        extra = extra_for(e)
        if extra is None:
            raise
        what = f"`tether {' '.join(a for a in sys.argv[1:3] if not a.startswith('-'))}`"
        click.echo(f"error: {MissingExtra(what, extra, e.name or '?')}", err=True)
        sys.exit(2)
    except Exception as e:
        from tether.errors import TetherError

        if not isinstance(e, TetherError):
            raise
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def not_text(args: list[str]) -> str | None:
    """The first argument that holds bytes which are not UTF-8, shown escaped; None if none."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return ascii(arg)
    return None
