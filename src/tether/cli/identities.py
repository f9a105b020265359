"""``tether admins``, ``tether approvers`` and ``tether principals``: register, list and
revoke credentials.

Naming who may approve, or whom a run may act for, is itself a decision: every add and revoke
of an approver or principal takes an administrator's credential (``TETHER_ADMIN_TOKEN``),
and is audited as that administrator's. The first administrator is made once, by
``tether admins add NAME`` on a store that has none; later ones only by an administrator. An
agent's process holds a principal credential, which mints nothing."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from tether.cli.common import DB_OPTION, JSON_OPTION
from tether.cli.output import Col, age, echo_json, note, table, when
from tether.cli.shared import (
    TOKEN_ENV,
    Kind,
    look,
    open_store,
    operator,
    parse_scopes,
    token_file_option,
)

if TYPE_CHECKING:
    from tether.core.principal import Identity
    from tether.identity import Registered
    from tether.store.base import Store


def _print_credential(identity: Identity, token: str) -> None:
    """The notes go to stderr and the credential alone to stdout, so that
    ``TOKEN=$(tether approvers add …)`` captures exactly the credential."""
    where = "any tenant" if identity.any_tenant else "tenant " + ", ".join(sorted(identity.tenants))
    note(f"{identity.kind} {identity.name} ({identity.credential_id}) for {where}.")
    note(
        f"This credential is shown once; give it to {identity.name} to use as "
        f"{TOKEN_ENV[identity.kind]} or with --token-file:"
    )
    click.echo(token)


def _list(db: str, kind: Kind, as_json: bool) -> None:
    from tether.identity import list_identities

    with look(db) as store:
        found = list_identities(store, kind)
    if as_json:
        echo_json([r.to_dict() for r in found])
        return
    columns = [Col("credential", whole=True), Col("name", whole=True), Col("tenants")]
    if kind == "principal":
        columns.append(Col("scopes"))
    columns += [Col("added"), Col("state")]
    table(
        columns,
        (_row(r) for r in found),
        empty=f"no {kind}s registered; add one with `tether {kind}s add NAME"
        + ("`" if kind == "admin" else " --tenant T`"),
    )


def _row(r: Registered) -> list[str]:
    i = r.identity
    row = [i.credential_id or "-", i.name, "*" if i.any_tenant else ",".join(sorted(i.tenants))]
    if i.kind == "principal":
        row.append(",".join(sorted(i.scopes)) or "-")
    state = "active" if r.revoked_at is None else f"revoked {when(r.revoked_at)}"
    if not r.sealed:
        state = "NOT SEALED (edited outside tether; decides nothing)"
    return [*row, age(r.created_at), state]


def admin(store: Store, token_file: str | None, action: str) -> Identity:
    """The administrator whose credential this command presents, or a refusal saying how to
    get one (the first is made by ``tether admins add NAME`` on a store that has none)."""
    from tether.errors import CredentialMissing
    from tether.identity import authenticate, list_identities, read_token

    token = read_token("admin", token_file)
    if token is None:
        first = not list_identities(store, "admin")
        hint = (
            "this store has no administrator yet: make the first with `tether admins add NAME`"
            if first
            else "ask an administrator for theirs, or to do it"
        )
        raise CredentialMissing(
            f"{action} is an administrator's decision and needs an admin credential in "
            f"TETHER_ADMIN_TOKEN (or --token-file); {hint}",
            reasons=("no credential",),
        )
    return authenticate(store, token, "admin")


def _revoke(db: str, kind: Kind, name_or_id: str, token_file: str | None) -> None:
    from tether.identity import revoke_identity

    with open_store(db, create=False) as store:
        who = admin(store, token_file, f"revoking {kind}s")
        if kind == "admin":
            _keep_one_admin(store, name_or_id)
        revoked = revoke_identity(store, name_or_id, kind, now=time.time(), actor=who.name)
    for identity in revoked:
        click.echo(f"revoked {kind} {identity.name} ({identity.credential_id})")


def _keep_one_admin(store: Store, name_or_id: str) -> None:
    from tether.errors import IdentityError
    from tether.identity import list_identities

    active = [r.identity for r in list_identities(store, "admin") if r.active]
    left = [i for i in active if name_or_id not in (i.name, i.credential_id)]
    if active and not left:
        raise IdentityError(
            f"revoking {name_or_id} would leave no administrator; add another first "
            "(`tether admins add NAME` with your admin credential)"
        )


@click.group()
def admins() -> None:
    """Register, list and revoke administrators: who may name approvers and principals."""


@admins.command("add")
@DB_OPTION
@click.argument("name")
@token_file_option("admin")
def admins_add(db: str, name: str, token_file: str | None) -> None:
    """Register administrator NAME; prints their new credential (once) on the last line.

    On a store that has never had an administrator (and whose audit log verifies) this
    makes the first one, with no credential needed: whoever can run it on that store is
    trusted once. Afterwards it takes an administrator's credential; a store whose
    administrators were all lost is recovered by the key holder (`tether admins recover`)."""
    from tether.identity import add_identity, check_first_admin, check_registration

    check_registration(name, "admin", frozenset(), False, frozenset())
    with open_store(db, create=True) as store:
        if check_first_admin(store):
            actor = operator()
        else:
            actor = admin(store, token_file, "adding an administrator").name
        identity, token = add_identity(store, name, "admin", now=time.time(), actor=actor)
    _print_credential(identity, token)


@admins.command("recover")
@DB_OPTION
@click.argument("name")
@click.option(
    "--keyring",
    "keyring_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="The store's audit keyring (`tether audit export-key` wrote it, or the key file).",
)
def admins_recover(db: str, name: str, keyring_file: str) -> None:
    """Register administrator NAME as the holder of the store's audit key: for a store whose
    administrators' credentials were all lost. Prints the credential (once) on the last
    line; audited as the key holder's decision."""
    from tether.identity import add_identity, check_registration, prove_key_holder

    check_registration(name, "admin", frozenset(), False, frozenset())
    with open_store(db, create=False) as store:
        prove_key_holder(store, keyring_file)
        identity, token = add_identity(
            store, name, "admin", now=time.time(), actor="audit key holder"
        )
    _print_credential(identity, token)


@admins.command("list")
@DB_OPTION
@JSON_OPTION
def admins_list(db: str, as_json: bool) -> None:
    """List administrators' credentials (never their secrets), revoked ones marked."""
    _list(db, "admin", as_json)


@admins.command("revoke")
@DB_OPTION
@click.argument("name_or_credential_id")
@token_file_option("admin")
def admins_revoke(db: str, name_or_credential_id: str, token_file: str | None) -> None:
    """Revoke an administrator (never the last one)."""
    _revoke(db, "admin", name_or_credential_id, token_file)


@click.group()
def approvers() -> None:
    """Register, list and revoke approvers: who may decide approvals, by credential."""


@approvers.command("add")
@DB_OPTION
@click.argument("name")
@click.option("--tenant", "tenants", multiple=True, help="A tenant they approve for (repeat).")
@click.option("--any-tenant", is_flag=True, help="They may approve for every tenant.")
@token_file_option("admin")
def approvers_add(
    db: str, name: str, tenants: tuple[str, ...], any_tenant: bool, token_file: str | None
) -> None:
    """Register approver NAME; prints their new credential (once) on the last line. Takes an
    administrator's credential (TETHER_ADMIN_TOKEN)."""
    from tether.identity import add_identity, check_registration

    check_registration(name, "approver", frozenset(tenants), any_tenant, frozenset())
    with open_store(db, create=False) as store:
        who = admin(store, token_file, "naming an approver")
        identity, token = add_identity(
            store,
            name,
            "approver",
            now=time.time(),
            tenants=tenants,
            any_tenant=any_tenant,
            actor=who.name,
        )
    _print_credential(identity, token)


@approvers.command("list")
@DB_OPTION
@JSON_OPTION
def approvers_list(db: str, as_json: bool) -> None:
    """List approvers' credentials (never their secrets), revoked ones marked."""
    _list(db, "approver", as_json)


@approvers.command("revoke")
@DB_OPTION
@click.argument("name_or_credential_id")
@token_file_option("admin")
def approvers_revoke(db: str, name_or_credential_id: str, token_file: str | None) -> None:
    """Revoke one credential by its id, or every credential of an approver by name."""
    _revoke(db, "approver", name_or_credential_id, token_file)


@click.group()
def principals() -> None:
    """Register, list and revoke principals: who a run may act for, by credential."""


@principals.command("add")
@DB_OPTION
@click.argument("name")
@click.option("--tenant", required=True, help="The tenant the principal acts in.")
@click.option("--scopes", required=True, help="Comma-separated scopes ('' for none).")
@token_file_option("admin")
def principals_add(db: str, name: str, tenant: str, scopes: str, token_file: str | None) -> None:
    """Register principal NAME; prints their new credential (once) on the last line. Takes
    an administrator's credential (TETHER_ADMIN_TOKEN)."""
    from tether.identity import add_identity, check_registration

    scope_set = parse_scopes(scopes)
    check_registration(name, "principal", frozenset({tenant}), False, scope_set)
    with open_store(db, create=False) as store:
        who = admin(store, token_file, "naming a principal")
        identity, token = add_identity(
            store,
            name,
            "principal",
            now=time.time(),
            tenants=(tenant,),
            scopes=scope_set,
            actor=who.name,
        )
    _print_credential(identity, token)


@principals.command("list")
@DB_OPTION
@JSON_OPTION
def principals_list(db: str, as_json: bool) -> None:
    """List principals' credentials (never their secrets), revoked ones marked."""
    _list(db, "principal", as_json)


@principals.command("revoke")
@DB_OPTION
@click.argument("name_or_credential_id")
@token_file_option("admin")
def principals_revoke(db: str, name_or_credential_id: str, token_file: str | None) -> None:
    """Revoke one credential by its id, or every credential of a principal by name."""
    _revoke(db, "principal", name_or_credential_id, token_file)
