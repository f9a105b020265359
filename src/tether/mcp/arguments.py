"""What the gateway refuses to forward, before the gate judges a call: arguments the pinned
schema does not declare (a server that added one after it was pinned would receive what no
one reviewed), and credential-shaped values in arguments the tool does not declare secret
(an agent tricked into pasting a key would hand it to the server)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from tether.core.digest import canonical_json, sha256_hex
from tether.core.principal import Principal
from tether.core.screening import CREDENTIAL_MIN_LENGTH, CREDENTIAL_PATTERN
from tether.tools.registry import Manifest, Registry
from tether.tools.tenancy import fill_tenant


def undeclared_arguments(manifest: Manifest | None, arguments: Mapping[str, Any]) -> list[str]:
    """The arguments the pinned schema does not declare, quoted (none if the schema says
    ``additionalProperties: true`` or declares no properties at all)."""
    if manifest is None:
        return []
    schema = manifest.parameters
    declared = schema.get("properties")
    if not isinstance(declared, Mapping) or schema.get("additionalProperties") is True:
        return []
    return sorted(repr(k) for k in arguments if k not in declared)


def credential_arguments(manifest: Manifest | None, arguments: Mapping[str, Any]) -> list[str]:
    """The arguments holding a credential-shaped value that the tool does not declare
    secret (its ``sensitive_fields``), quoted."""
    declared = manifest.sensitive_fields if manifest is not None else frozenset()
    return sorted(
        repr(key) for key, value in arguments.items() if key not in declared and _holds(value)
    )


def _holds(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) >= CREDENTIAL_MIN_LENGTH and CREDENTIAL_PATTERN.search(value) is not None
    if isinstance(value, Mapping):
        return any(_holds(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_holds(v) for v in value)
    return False


def argument_digest(
    registry: Registry, principal: Principal, name: str, arguments: dict[str, Any]
) -> str:
    """The arguments' digest as the gate binds them (the caller's tenant filled in where
    the tool takes it), so it names the same call as the approvals the store holds."""
    tool = registry.find(name)
    parts = tool.manifest.tenant_parts if tool is not None else None
    if parts is not None:
        # Arguments the gate refuses anyway are digested as sent.
        with contextlib.suppress(Exception):
            arguments = fill_tenant(arguments, parts, principal.tenant)
    return "sha256:" + sha256_hex(canonical_json(arguments))
