"""Who acts and who decides: the principal a run acts for, and the identity a credential
proves (an approver or a principal), with the shape of the tokens that carry them.

These are plain values, at the bottom of the import graph: the policy, the store's records,
approvals (which redact tokens) and every entrance name them, and none of them needs the
authority that issues credentials (``tether.identity``) to do so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.errors import IdentityError

Kind = Literal["approver", "principal", "admin"]
KINDS: tuple[Kind, ...] = ("approver", "principal", "admin")
TOKEN_PREFIX = "tth_"
# A token (fullmatch), or one inside a longer text such as an argument or an error message
# (search), for redaction.
TOKEN_PATTERN = re.compile(r"tth_(cred-[0-9a-f]{16})_([A-Za-z0-9_\-]{43})")


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who a run acts for: a subject, the one tenant whose data it may touch, its scopes."""

    subject: str
    tenant: str
    scopes: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "tenant": self.tenant, "scopes": sorted(self.scopes)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Principal:
        return cls(subject=data["subject"], tenant=data["tenant"], scopes=frozenset(data["scopes"]))


@dataclass(frozen=True, kw_only=True)
class Identity:
    """Who presented a credential: a registered approver or principal.

    ``via`` says how they were authenticated: ``token`` (a tether credential), ``code``
    (trusted in-process code that named itself, such as ``Gate.approve(id, "reviewer-5")``),
    and later ``proxy`` or ``oidc``."""

    name: str
    kind: Kind
    tenants: frozenset[str] = frozenset()
    any_tenant: bool = False  # an explicit choice at registration, never a default
    scopes: frozenset[str] = frozenset()
    credential_id: str | None = None
    via: str = "token"

    @classmethod
    def trusted(cls, name: str) -> Identity:
        """An approver named by in-process code, which is trusted as the program itself is;
        the command line never makes one of these from a typed name."""
        return cls(name=name, kind="approver", any_tenant=True, via="code")

    def allows_tenant(self, tenant: str) -> bool:
        return self.any_tenant or tenant in self.tenants

    def principal(self) -> Principal:
        """The principal a run acts for when this identity starts it."""
        if self.kind != "principal" or len(self.tenants) != 1:
            raise IdentityError(f"{self.name} is not a principal of one tenant")
        (tenant,) = self.tenants
        return Principal(subject=self.name, tenant=tenant, scopes=self.scopes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "tenants": sorted(self.tenants),
            "any_tenant": self.any_tenant,
            "scopes": sorted(self.scopes),
            "credential_id": self.credential_id,
            "via": self.via,
        }
