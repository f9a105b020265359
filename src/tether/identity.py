"""Registered identities: approvers and principals, each known by a credential (invariant I9).

A name someone typed proves nothing. An identity is registered once (``tether approvers add``,
``tether principals add``), which makes a credential shown that one time; the store keeps only
its SHA-256. Whoever later presents the credential *is* that identity, and nothing else is.

A token reads ``tth_<credential_id>_<secret>``: the prefix makes a leaked one easy to spot
(and to scan for), the credential id lets it be found and revoked by id without the secret,
and the secret is 256 random bits, so a plain hash is enough (no password stretching needed).

Tokens are one way in. ``Authenticator`` is what every way implements: a reverse proxy's
authenticated header, or an OIDC ID token, maps onto the same ``Identity`` by its registered
name, and everything downstream (who may approve, for which tenant) stays the same.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether.core.digest import canonical_json
from tether.core.principal import KINDS, TOKEN_PATTERN, TOKEN_PREFIX, Identity, Kind
from tether.errors import (
    ConfigurationError,
    CredentialMissing,
    CredentialRefused,
    IdentityError,
)

if TYPE_CHECKING:  # store.base imports approvals, which imports this module's token pattern
    from tether.store.base import Store, Tx
    from tether.store.rows import CredentialRecord

TOKEN_ENV: Mapping[Kind, str] = {
    "approver": "TETHER_APPROVER_TOKEN",
    "principal": "TETHER_PRINCIPAL_TOKEN",
    "admin": "TETHER_ADMIN_TOKEN",
}
_ID_PREFIX = "cred"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+\-]{0,127}")


@dataclass(frozen=True, kw_only=True)
class Registered:
    """A stored credential as ``tether approvers list`` shows it: never its secret or hash."""

    identity: Identity
    created_at: float
    revoked_at: float | None
    # False for a row without a valid seal (edited or inserted outside tether): listed so
    # that someone looks, but it decides nothing.
    sealed: bool = True

    @property
    def active(self) -> bool:
        return self.revoked_at is None and self.sealed

    def to_dict(self) -> dict[str, Any]:
        data = self.identity.to_dict()
        data.pop("via")
        extra = {} if self.sealed else {"sealed": False}
        return {**data, "created_at": self.created_at, "revoked_at": self.revoked_at, **extra}


class Authenticator(Protocol):
    """Turns what a caller presents into a registered identity, or raises
    ``CredentialRefused``. A proxy-header or OIDC authenticator checks what it trusts (the
    proxy's connection, the token's signature) and then looks the name up the same way."""

    via: str

    def authenticate(self, store: Store, presented: str, kind: Kind | None = None) -> Identity:
        """The identity ``presented`` proves, of ``kind`` if given."""
        ...


def token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def refused(kind: Kind | None) -> CredentialRefused:
    what = f"{kind} credential" if kind else "credential"
    return CredentialRefused(
        f"the {what} was not accepted (unknown, revoked or malformed); "
        f"ask an administrator for a new one (tether {kind or 'approver'}s add NAME"
        f"{'' if kind == 'admin' else ' --tenant T'})",
        reasons=("credential refused",),
    )


@dataclass(frozen=True)
class TokenAuthenticator:
    """Bearer tokens made by ``add_identity``."""

    via: str = "token"

    def authenticate(self, store: Store, presented: str, kind: Kind | None = None) -> Identity:
        match = TOKEN_PATTERN.fullmatch(presented.strip())
        if match is None:
            raise refused(kind)
        with store.read() as tx:
            record = tx.get_credential(match.group(1))
        # Found by its id, then compared in constant time: the lookup never depends on the
        # secret, and a wrong secret takes as long to refuse as a right one to accept.
        if (
            record is None
            or not hmac.compare_digest(record.token_hash, token_hash(presented.strip()))
            or record.revoked_at is not None
            or (kind is not None and record.kind != kind)
        ):
            raise refused(kind)
        if not record.sealed_by(store.keys):
            raise unsealed(record)
        return identity_of(record, via=self.via)


def authenticate(store: Store, token: str, kind: Kind | None = None) -> Identity:
    """The identity a tether token proves; ``CredentialRefused`` if it proves none."""
    return TokenAuthenticator().authenticate(store, token, kind)


def live_credential(
    tx: Tx, credential_id: str, name: str, kind: Kind | None = None
) -> CredentialRecord:
    """The credential ``credential_id`` as it stands in ``tx``: it must still exist, be
    unrevoked, name ``name`` and be of ``kind``. Decisions call this in their own
    transaction, so a credential revoked after it was authenticated decides nothing."""
    record = tx.get_credential(credential_id)
    if (
        record is None
        or record.revoked_at is not None
        or record.name != name
        or (kind is not None and record.kind != kind)
    ):
        raise CredentialRefused(
            f"{name}'s credential {credential_id} is revoked or unknown, so it decides "
            f"nothing; ask an administrator for a new one (tether {kind or 'approver'}s add "
            "NAME --tenant T)",
            reasons=("credential refused",),
        )
    if not record.sealed_by(tx.keys):
        raise unsealed(record)
    return record


def unsealed(record: CredentialRecord) -> CredentialRefused:
    """The refusal of a credential row whose seal is missing or does not verify: it was
    inserted or edited outside tether (its name, kind, tenants, scopes or revocation), or
    made before credentials were sealed."""
    how = (
        "it was made before credentials were sealed: the key holder can seal the existing "
        "ones after checking them (`tether migrate --seal-credentials`), or an administrator "
        "issues a new one"
        if record.seal is None
        else "run `tether audit verify`, and have an administrator issue a new one"
    )
    return CredentialRefused(
        f"credential {record.credential_id} ({record.name}) is not as tether wrote it: its "
        f"row carries no valid seal, so it decides nothing; {how}",
        reasons=("credential refused", "credential row not sealed"),
    )


def identity_of(record: CredentialRecord, *, via: str = "token") -> Identity:
    data = json.loads(record.record_json)
    kind = record.kind
    if kind not in KINDS:
        raise IdentityError(f"credential {record.credential_id} has unknown kind {kind!r}")
    return Identity(
        name=record.name,
        kind=kind,
        tenants=frozenset(data.get("tenants", ())),
        any_tenant=bool(data.get("any_tenant", False)),
        scopes=frozenset(data.get("scopes", ())),
        credential_id=record.credential_id,
        via=via,
    )


# -- registering, listing, revoking --------------------------------------------------------------
def check_registration(
    name: str, kind: Kind, tenants: frozenset[str], any_tenant: bool, scopes: frozenset[str]
) -> None:
    """Refuse a registration that is ambiguous or grants by accident."""
    if not _NAME.fullmatch(name) or name.startswith(f"{_ID_PREFIX}-"):
        raise IdentityError(
            f"{name!r} cannot name an {kind}: use letters, digits and . _ @ + - "
            f"(up to 128, not starting with '{_ID_PREFIX}-')"
        )
    if any(not t.strip() for t in tenants):
        raise IdentityError("a tenant cannot be empty; give its name with --tenant")
    if kind == "approver":
        if any_tenant == bool(tenants):
            raise IdentityError(
                f"say which tenants {name} may approve for: --tenant T (repeatable), "
                "or --any-tenant, not both"
            )
        if scopes:
            raise IdentityError("scopes belong to principals; an approver has none")
    elif kind == "admin":
        if tenants or any_tenant or scopes:
            raise IdentityError(
                f"an administrator registers identities for every tenant; {name} takes no "
                "--tenant or scopes"
            )
    elif any_tenant or len(tenants) != 1:
        raise IdentityError(f"a principal acts in exactly one tenant; give {name} one --tenant T")


def add_identity(
    store: Store,
    name: str,
    kind: Kind,
    *,
    now: float,
    tenants: Iterable[str] = (),
    any_tenant: bool = False,
    scopes: Iterable[str] = (),
    actor: str | None = None,
) -> tuple[Identity, str]:
    """Register ``name`` and make its credential: the identity and the token, which is shown
    this once and never stored (only its hash is)."""
    from tether.store.rows import CredentialRecord

    tenant_set, scope_set = frozenset(tenants), frozenset(scopes)
    check_registration(name, kind, tenant_set, any_tenant, scope_set)
    credential_id = f"{_ID_PREFIX}-{secrets.token_hex(8)}"
    token = f"{TOKEN_PREFIX}{credential_id}_{secrets.token_urlsafe(32)}"
    identity = Identity(
        name=name,
        kind=kind,
        tenants=tenant_set,
        any_tenant=any_tenant,
        scopes=scope_set,
        credential_id=credential_id,
    )
    record = CredentialRecord(
        credential_id=credential_id,
        name=name,
        kind=kind,
        token_hash=token_hash(token),
        record_json=canonical_json(
            {"tenants": sorted(tenant_set), "any_tenant": any_tenant, "scopes": sorted(scope_set)}
        ),
        created_at=now,
    )
    with store.transaction() as tx:
        tx.insert_credential(record)
        _audit(tx, "credential_added", identity, now, actor)
    return identity, token


def list_identities(store: Store, kind: Kind | None = None) -> list[Registered]:
    """Every registered credential (revoked ones too, marked), oldest first."""
    return [
        Registered(
            identity=identity_of(r),
            created_at=r.created_at,
            revoked_at=r.revoked_at,
            sealed=r.sealed_by(store.keys),
        )
        for r in store.list_credentials()
        if kind is None or r.kind == kind
    ]


def revoke_identity(
    store: Store, name_or_id: str, kind: Kind, *, now: float, actor: str | None = None
) -> list[Identity]:
    """Revoke one credential (by its id) or every active credential of a name."""
    candidates = _candidate_ids(store, name_or_id)
    with store.transaction() as tx:
        # Read again inside the transaction: what counts is the state it commits against.
        targets = [
            r
            for r in (tx.get_credential(c) for c in candidates)
            # A row that is not as tether wrote it decides nothing already; sealing it
            # again (as revoked) would make the edit look like tether's own.
            if r is not None and r.kind == kind and r.revoked_at is None and r.sealed_by(tx.keys)
        ]
        if not targets:
            raise IdentityError(
                f"no active {kind} named {name_or_id!r} or with that credential id; "
                f"see `tether {kind}s list`"
            )
        for record in targets:
            tx.update_credential(replace(record, revoked_at=now))
            _audit(tx, "credential_revoked", identity_of(record), now, actor)
    return [identity_of(r) for r in targets]


def _candidate_ids(store: Store, name_or_id: str) -> list[str]:
    if name_or_id.startswith(f"{_ID_PREFIX}-"):
        return [name_or_id]
    return [r.credential_id for r in store.list_credentials() if r.name == name_or_id]


def _audit(tx: Tx, kind: str, identity: Identity, now: float, actor: str | None) -> None:
    # Who, what kind, where; never the token or its hash.
    data = identity.to_dict()
    data.pop("via")
    tx.append_audit(kind, at=now, actor=actor, data=data)


# -- the first administrator, and the key holder's recovery -------------------------------------
def check_first_admin(store: Store) -> bool:
    """Whether ``tether admins add`` may make the first administrator with no credential:
    only on a store that has never had one. A store with admin rows (active, revoked or
    edited) needs an admin's credential; so does one whose audit log does not verify, where
    deleted admin rows would look like none (the key holder recovers it instead)."""
    if any(r.kind == "admin" for r in store.list_credentials()):
        return False
    report = store.verify_audit()
    if not report.intact:
        raise IdentityError(
            f"the store's audit log does not verify ({report.problem}), so it cannot show that "
            "no administrator was ever made; the holder of the audit key can make one with "
            "`tether admins recover NAME --keyring FILE`"
        )
    return True


def prove_key_holder(store: Store, keyring_file: str) -> None:
    """Refuse unless the keyring in ``keyring_file`` holds the store's current audit key:
    whoever holds it can already write anything the store would accept, so recovering an
    administrator gives them nothing new, and nobody else can."""
    from tether.evidence.keys import AuditKeys

    try:
        ring = AuditKeys.from_env_value(Path(keyring_file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ConfigurationError) as e:
        why = e.strerror if isinstance(e, OSError) else e
        raise IdentityError(
            f"{keyring_file} holds no audit keyring ({why}); give the store's key file or "
            "what `tether audit export-key` printed"
        ) from None
    text = f"tether admin recovery\n{store.store_id}"
    key_id, mac = store.keys.mac(text)
    if not ring.has(key_id) or not ring.check(key_id, text, mac):
        raise IdentityError(
            f"the keyring in {keyring_file} does not hold this store's audit key {key_id}; "
            "only the key holder can recover an administrator"
        )


# -- reading a token ------------------------------------------------------------------------------
def read_token(
    kind: Kind, token_file: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The token given with ``--token-file`` (which wins: it was asked for explicitly), else
    the one in the kind's environment variable, else None."""
    if token_file is not None:
        return _read_token_file(Path(token_file))
    value = (os.environ if environ is None else environ).get(TOKEN_ENV[kind], "").strip()
    return value or None


def _read_token_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        # A credential others can read is a credential others have.
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise IdentityError(
                f"token file {path} can be read by other users; run `chmod 600 {path}` and retry"
            )
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "it is not text"
        raise IdentityError(f"cannot read token file {path}: {why}") from None
    if not token:
        raise IdentityError(f"token file {path} is empty; put the credential in it")
    return token


def require_token(kind: Kind, token_file: str | None, action: str) -> str:
    """The presented token, or a refusal saying how to get one."""
    token = read_token(kind, token_file)
    if token is None:
        how = "NAME" if kind == "admin" else "NAME --tenant T"
        raise CredentialMissing(
            f"{action} needs an {kind} credential: register one with "
            f"`tether {kind}s add {how}`, then set {TOKEN_ENV[kind]} "
            "(or pass --token-file)",
            reasons=("no credential",),
        )
    return token
