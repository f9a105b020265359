"""Helpers several command groups share: opening the store, credentials, the app of a run.

Everything beyond click is imported inside the functions: these modules are imported to
build the command tree, which ``tether --help`` does and no store or gate is needed for."""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import click

from tether.cli.common import open_cli_store

if TYPE_CHECKING:
    from tether.core.principal import Identity
    from tether.runs.app import App
    from tether.store import Store

F = TypeVar("F", bound=Callable[..., Any])
Kind = Literal["approver", "principal", "admin"]

# The values of RunStatus, ApprovalStatus and EffectStatus, spelled out so that building the
# options does not import the modules that define them (tests/cli/test_cli_shape.py checks that
# they still match).
RUN_STATUSES = (
    "queued",
    "running",
    "awaiting_approval",
    "awaiting_reconciliation",
    "awaiting_model",
    "completed",
    "failed",
    "cancelled",
    "rolled_back",
)
APPROVAL_STATUSES = ("pending", "approved", "denied", "expired", "used", "edited")
EFFECT_STATUSES = (
    "dispatched",
    "committed",
    "failed",
    "unknown",
    "reconciled_committed",
    "reconciled_absent",
)
# Where the environment variable for each kind of credential is read (tether.identity.TOKEN_ENV).
TOKEN_ENV: dict[Kind, str] = {
    "approver": "TETHER_APPROVER_TOKEN",
    "principal": "TETHER_PRINCIPAL_TOKEN",
    "admin": "TETHER_ADMIN_TOKEN",
}


def open_store(db: str, *, create: bool, read_only: bool = False) -> Store:
    return open_cli_store(db, create=create, read_only=read_only)


def look(db: str) -> Store:
    """A store opened only to read: never created, never migrated, never written."""
    return open_store(db, create=False, read_only=True)


def json_input(value: str, option: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(
            f"is not valid JSON ({e.msg} at character {e.pos}); quote it, e.g. '{{\"k\": 1}}'",
            param_hint=option,
        ) from None


def operator() -> str:
    """Who ran an administrative command, as the operating system knows them."""
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a bare container): say so rather than guess
        return "local:unknown"


def parse_scopes(text: str) -> frozenset[str]:
    return frozenset(s.strip() for s in text.split(",") if s.strip())


TOKEN_FILE_HELP = "Read the {kind} credential from this file (mode 600) instead of ${env}."


def token_file_option(kind: Kind) -> Callable[[F], F]:
    return click.option(
        "--token-file",
        type=click.Path(dir_okay=False),
        default=None,
        help=TOKEN_FILE_HELP.format(kind=kind, env=TOKEN_ENV[kind]),
    )


def approver_options(f: F) -> F:
    """The credential that says who is deciding, and the optional name to check it against."""
    f = token_file_option("approver")(f)
    return click.option(
        "--approver",
        "asserted",
        default=None,
        help="Your approver name: checked against your credential, never instead of it.",
    )(f)


def approver(store: Store, token: str, asserted: str | None) -> Identity:
    """The approver ``token`` proves; ``asserted``, if given, must name them."""
    from tether.errors import CredentialRefused
    from tether.identity import authenticate

    who = authenticate(store, token, "approver")
    if asserted is not None and asserted != who.name:
        raise CredentialRefused(
            f"--approver {asserted} does not name the holder of this credential; drop "
            f"--approver, or present {asserted}'s own credential",
            reasons=("approver name does not match the credential",),
        )
    return who


def check_tenant(who: Identity, tenant: str, doing: str) -> None:
    """Refuse an approver whose credential does not cover ``tenant``."""
    from tether.errors import CredentialRefused

    if not who.allows_tenant(tenant):
        raise CredentialRefused(
            f"{who.name} may not {doing} tenant {tenant}'s runs; ask an approver of that tenant",
            reasons=("tenant not allowed",),
        )


APP_OPTION = click.option(
    "--app",
    "app_ref",
    envvar="TETHER_APP",
    default=None,
    help="The agent app as module:attribute (default: the one the run was started with).",
)


def app_for_run(store: Store, run_id: str, app_ref: str | None) -> tuple[App, str]:
    from tether.errors import ConfigurationError, RunNotFound
    from tether.runs.app import load_app

    with store.read() as tx:
        record = tx.get_run(run_id)
    if record is None:
        raise RunNotFound(f"no run {run_id}; see `tether runs list`")
    if app_ref is None:
        app_ref = json.loads(record.checkpoint_json).get("app")
        if not app_ref:
            raise ConfigurationError(f"run {run_id} was not started with --app; pass --app")
    return load_app(app_ref), app_ref
