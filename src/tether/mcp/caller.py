"""Who calls the gateway, in which session: over stdio the config's principal, over HTTP the
principal whose credential the request bears (never anything the client says about itself).
The caller's run id is derived here, once, from its credential, subject and session."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tether.core.digest import canonical_json, sha256_hex
from tether.core.principal import Principal
from tether.errors import ConfigurationError, CredentialMissing
from tether.identity import authenticate

if TYPE_CHECKING:
    from pathlib import Path

    from tether.core.principal import Identity
    from tether.store.base import Store


@dataclass(frozen=True)
class Caller:
    """Who calls, in which session: the principal and the tether run the session is."""

    principal: Principal
    session: str
    credential_id: str | None = None
    # No protocol session (the stateless protocol, or a client that never initialises):
    # request ids repeat across the client's processes, so they alone name no call.
    stateless: bool = False

    @cached_property  # frozen, so computed once per caller (each call asks for it)
    def run_id(self) -> str:
        # The credential is part of the run's name, so a session id someone else learnt
        # does not give them that session's run (or its recorded results).
        seed = canonical_json([self.credential_id, self.principal.subject, self.session])
        return "mcp-" + sha256_hex(seed)[:24]


def bearer(headers: Mapping[str, str]) -> str:
    value = headers.get("authorization") or ""
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise CredentialMissing(
            "the gateway needs a principal credential: send 'Authorization: Bearer tth_...' "
            "(made by `tether principals add NAME --tenant T`)"
        )
    return token.strip()


SESSION_META = "io.tether/session"  # a stateless client's name for its conversation
CALL_META = "io.tether/call_id"  # a client's own id for one intended call


def named_session(meta: Mapping[str, Any] | None) -> str:
    """The conversation a client names in a request's ``_meta`` (``io.tether/session``),
    or "" when it names none."""
    named = (meta or {}).get(SESSION_META)
    return str(named)[:200] if isinstance(named, str | int) and named != "" else ""


def caller_from_headers(
    store: Store, headers: Mapping[str, str], meta: Mapping[str, Any] | None = None
) -> Caller:
    """The caller of an HTTP request. Its session is the protocol's ``Mcp-Session-Id``;
    with none (the stateless protocol), the conversation the client names in the request's
    ``_meta`` (``io.tether/session``), else the credential's own standing session — so an
    approval asked for in one request is found by the next, and a session's budget is not
    one request's."""
    identity = authenticate(store, bearer(headers), "principal")
    session = headers.get("mcp-session-id")
    if session:
        return Caller(identity.principal(), session, identity.credential_id)
    return Caller(
        identity.principal(),
        "stateless:" + named_session(meta),
        identity.credential_id,
        stateless=True,
    )


def stdio_caller(
    identity: Identity | None,
    principal: Principal | None,
    process_session: str,
    named: str,
    config_path: Path,
) -> Caller:
    """The caller over stdio: the principal credential the gateway was started with, else
    the config's principal. Its session is the gateway process's, unless the client names
    its conversation in ``_meta``: that one outlives the process (a restart, a client that
    starts the gateway per task), and its request ids then repeat across processes, as over
    the stateless protocol."""
    session = "stateless:" + named if named else process_session
    if identity is not None:
        return Caller(identity.principal(), session, identity.credential_id, stateless=bool(named))
    if principal is None:
        raise ConfigurationError(
            f"gateway config {config_path} has no [principal]: over stdio the gateway acts "
            "for the principal the config names, or for the principal credential in "
            "TETHER_PRINCIPAL_TOKEN"
        )
    return Caller(principal, session, stateless=bool(named))
