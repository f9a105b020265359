"""Who calls the gateway, in which session: over stdio the config's principal, over HTTP the
principal whose credential the request bears (never anything the client says about itself).
The caller's run id is derived here, once, from its credential, subject and session."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from tether.core.digest import canonical_json, sha256_hex
from tether.core.principal import Principal
from tether.errors import CredentialMissing
from tether.identity import authenticate

if TYPE_CHECKING:
    from tether.store.base import Store


@dataclass(frozen=True)
class Caller:
    """Who calls, in which session: the principal and the tether run the session is."""

    principal: Principal
    session: str
    credential_id: str | None = None

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


def caller_from_headers(store: Store, headers: Mapping[str, str]) -> Caller:
    identity = authenticate(store, bearer(headers), "principal")
    # No session header (a stateless client): each request is its own session, so nothing
    # can be replayed across requests — and nothing can collide either.
    session = headers.get("mcp-session-id") or uuid.uuid4().hex
    return Caller(identity.principal(), session, identity.credential_id)
