"""``tether approvers`` and ``tether principals``: register, list and revoke credentials."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from tether.cli.common import DB_OPTION, JSON_OPTION
from tether.cli.output import Col, age, echo_json, note, table, when
from tether.cli.shared import TOKEN_ENV, Kind, look, open_store, operator, parse_scopes

if TYPE_CHECKING:
    from tether.core.principal import Identity
    from tether.identity import Registered


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
        empty=f"no {kind}s registered; add one with `tether {kind}s add NAME --tenant T`",
    )


def _row(r: Registered) -> list[str]:
    i = r.identity
    row = [i.credential_id or "-", i.name, "*" if i.any_tenant else ",".join(sorted(i.tenants))]
    if i.kind == "principal":
        row.append(",".join(sorted(i.scopes)) or "-")
    state = "active" if r.revoked_at is None else f"revoked {when(r.revoked_at)}"
    return [*row, age(r.created_at), state]


def _revoke(db: str, kind: Kind, name_or_id: str) -> None:
    from tether.identity import revoke_identity

    with open_store(db, create=False) as store:
        revoked = revoke_identity(store, name_or_id, kind, now=time.time(), actor=operator())
    for identity in revoked:
        click.echo(f"revoked {kind} {identity.name} ({identity.credential_id})")


@click.group()
def approvers() -> None:
    """Register, list and revoke approvers: who may decide approvals, by credential."""


@approvers.command("add")
@DB_OPTION
@click.argument("name")
@click.option("--tenant", "tenants", multiple=True, help="A tenant they approve for (repeat).")
@click.option("--any-tenant", is_flag=True, help="They may approve for every tenant.")
def approvers_add(db: str, name: str, tenants: tuple[str, ...], any_tenant: bool) -> None:
    """Register approver NAME; prints their new credential (once) on the last line."""
    from tether.identity import add_identity, check_registration

    check_registration(name, "approver", frozenset(tenants), any_tenant, frozenset())
    with open_store(db, create=True) as store:
        identity, token = add_identity(
            store,
            name,
            "approver",
            now=time.time(),
            tenants=tenants,
            any_tenant=any_tenant,
            actor=operator(),
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
def approvers_revoke(db: str, name_or_credential_id: str) -> None:
    """Revoke one credential by its id, or every credential of an approver by name."""
    _revoke(db, "approver", name_or_credential_id)


@click.group()
def principals() -> None:
    """Register, list and revoke principals: who a run may act for, by credential."""


@principals.command("add")
@DB_OPTION
@click.argument("name")
@click.option("--tenant", required=True, help="The tenant the principal acts in.")
@click.option("--scopes", required=True, help="Comma-separated scopes ('' for none).")
def principals_add(db: str, name: str, tenant: str, scopes: str) -> None:
    """Register principal NAME; prints their new credential (once) on the last line."""
    from tether.identity import add_identity, check_registration

    scope_set = parse_scopes(scopes)
    check_registration(name, "principal", frozenset({tenant}), False, scope_set)
    with open_store(db, create=True) as store:
        identity, token = add_identity(
            store,
            name,
            "principal",
            now=time.time(),
            tenants=(tenant,),
            scopes=scope_set,
            actor=operator(),
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
def principals_revoke(db: str, name_or_credential_id: str) -> None:
    """Revoke one credential by its id, or every credential of a principal by name."""
    _revoke(db, "principal", name_or_credential_id)
