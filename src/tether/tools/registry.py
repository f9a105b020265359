"""Tools, their manifests, and the registry the gate resolves calls in.

A manifest is everything the gate needs to judge a call before it runs: the JSON Schema of the
arguments, the risk tier, the scope and tenants it needs, what it may cost. Its
``schema_digest`` names exactly what the model was shown; pinning that digest means a tool that
changes under an agent (a new description, a widened schema) is refused until someone reviews
it and pins it again. A pin holds the ``manifest_digest``: the schema digest plus every field
that changes what a call may do (risk tier, scope, tenants and where the tenant sits, cost,
sensitive fields, result cap, timeout, compensation).

The module is long because a manifest (its fields and the checks on them) and the registry that
pins it are one contract.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints, overload

from tether.core.digest import digest
from tether.errors import ConfigurationError, InvalidArguments, ManifestDriftError, UnknownToolError
from tether.tools.schema import Check, compile_schema
from tether.tools.tenancy import has_property, split_path, tenant_like_arguments

if TYPE_CHECKING:
    import jsonschema

# jsonschema and pydantic are imported where a schema is first checked or built, not at
# ``import tether``: together they are most of its import time, and a process that only
# reads a store or prints a run needs neither.


class Risk(StrEnum):
    """Risk tiers, from harmless to cannot-be-undone."""

    READ = "read"
    SENSITIVE_READ = "sensitive_read"
    WRITE = "write"
    ADMIN = "admin"
    IRREVERSIBLE = "irreversible"

    @classmethod
    def parse(cls, value: str | Risk) -> Risk:
        """Accept tether's names and the seeds' (READONLY, WRITE, DANGEROUS, IRREVERSIBLE...)."""
        if isinstance(value, Risk):
            return value
        name = str(value).strip().lower()
        aliased = _RISK_ALIASES.get(name, name)
        try:
            return cls(aliased)
        except ValueError:
            known = ", ".join(r.value for r in cls)
            raise ConfigurationError(f"unknown risk tier {value!r}; use one of: {known}") from None


_RISK_ALIASES = {"readonly": "read", "read_only": "read", "dangerous": "irreversible"}

# The parameter a handler declares to receive its idempotency key.
OPERATION_KEY_PARAMETER = "operation_key"


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """A tool's pinned description: name, version, JSON Schema of its arguments, risk tier,
    cost, scope and tenancy, result limits and sensitive fields (docs/reference.md lists
    every field). Its digest pins the tool: a change is a new version."""

    name: str
    parameters: Mapping[str, Any]
    version: str = "1"
    server_id: str = "local"
    description: str = ""
    risk: Risk = Risk.READ
    required_scope: str | None = None
    allowed_tenants: frozenset[str] | None = None
    max_result_bytes: int = 65_536
    cost: int = 0
    sensitive_fields: frozenset[str] = frozenset()
    # None: the tool enforces its own timeouts (as HTTP clients do); a number makes the gate
    # stop waiting after that many seconds and record the outcome as unknown.
    timeout_s: float | None = None
    compensation: str | None = None
    # Where the tenant sits in the arguments ("tenant", "query.tenant"), or False for a tool
    # that is not tenant-scoped; see tether.tools.tenancy.
    tenant_path: str | None = None
    tenant_scoped: bool | None = None
    # The tool is a system of record: its output is trusted input for the data-flow policy
    # (tether.policy.provenance). Otherwise only ``trusted_fields``, the result keys whose values
    # the system vouches for, are; the rest of a tool's output is untrusted.
    trusted_output: bool = False
    trusted_fields: frozenset[str] = frozenset()
    # Confidentiality: the tool's output is the user's private data, so its values may go
    # only to destinations that may read them. ``readers_from``: result fields (paths, as
    # ``trusted_fields`` take them) naming who may read it (an email's sender and
    # recipients, a file's sharing list, a channel's members); private with none named
    # means the user only. Either makes the output private.
    private: bool = False
    readers_from: tuple[str, ...] = ()
    schema_digest: str = field(init=False)
    manifest_digest: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigurationError(
                f"tool name {self.name!r} must be letters, digits, '_' or '-' (models need that)"
            )
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(dict(self.parameters))
        except jsonschema.SchemaError as e:
            raise ConfigurationError(
                f"tool '{self.name}' has an invalid schema: {e.message}"
            ) from e
        object.__setattr__(self, "risk", Risk.parse(self.risk))
        self._check_tenancy()
        object.__setattr__(self, "schema_digest", self.compute_digest())
        # What a pin covers: the schema digest and every field that changes how the gate
        # treats the tool, so a quiet downgrade from irreversible to read is drift too.
        # Output trust changes what the policy lets a later call do, so a pin covers it; it is
        # in the digest only when declared, so the pins of every other tool stay as they were.
        trust: dict[str, Any] = {}
        if self.trusted_output:
            trust["trusted_output"] = True
        if self.trusted_fields:
            trust["trusted_fields"] = sorted(self.trusted_fields)
        if self.private or self.readers_from:
            trust["private"] = True
        if self.readers_from:
            trust["readers_from"] = list(self.readers_from)
        object.__setattr__(
            self,
            "manifest_digest",
            digest(
                {
                    **trust,
                    "schema_digest": self.schema_digest,
                    "risk": self.risk.value,
                    "required_scope": self.required_scope,
                    "allowed_tenants": sorted(self.allowed_tenants)
                    if self.allowed_tenants is not None
                    else None,
                    "max_result_bytes": self.max_result_bytes,
                    "cost": self.cost,
                    "sensitive_fields": sorted(self.sensitive_fields),
                    "compensation": self.compensation,
                    "timeout_s": self.timeout_s,
                    "tenant_path": self.tenant_path,
                    "tenant_scoped": self.tenant_scoped,
                }
            ),
        )

    @property
    def is_private(self) -> bool:
        """Whether the output is the user's private data (``private`` or ``readers_from``)."""
        return self.private or bool(self.readers_from)

    def _check_tenancy(self) -> None:
        if self.tenant_path is not None:
            if self.tenant_scoped is False:
                raise ConfigurationError(
                    f"tool '{self.name}' names tenant_path {self.tenant_path!r} but says "
                    "tenant_scoped=False; keep one"
                )
            path = split_path(self.tenant_path)
            if not has_property(self.parameters, path):
                raise ConfigurationError(
                    f"tool '{self.name}': tenant_path {self.tenant_path!r} is not an argument "
                    "in its schema; name the argument that holds the tenant"
                )
            return
        if self.tenant_scoped is None:
            found = tenant_like_arguments(self.parameters)
            if found:
                raise ConfigurationError(
                    f"tool '{self.name}' has an argument that looks like a tenant "
                    f"({', '.join(found)}) but its manifest does not say where the tenant is; "
                    f"declare tenant_path={found[0]!r}, or tenant_scoped=False if it is not "
                    "tenant data"
                )

    @cached_property  # asked at every call, by the gate and by the policy
    def tenant_parts(self) -> tuple[str, ...] | None:
        """The tenant's path in the arguments, split; None for a tool not tenant-scoped."""
        return None if self.tenant_path is None else split_path(self.tenant_path)

    def compute_digest(self) -> str:
        return digest(
            {
                "name": self.name,
                "description": self.description,
                "schema": self.parameters,
                "version": self.version,
                "server": self.server_id,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "server_id": self.server_id,
            "tool_name": self.name,
            "tool_version": self.version,
            "schema_digest": self.schema_digest,
            "risk_class": self.risk.value,
            "required_scope": self.required_scope,
            "allowed_tenants": sorted(self.allowed_tenants)
            if self.allowed_tenants is not None
            else None,
            "max_result_bytes": self.max_result_bytes,
            "cost": self.cost,
            "sensitive_fields": sorted(self.sensitive_fields),
            "timeout_s": self.timeout_s,
            "tenant_path": self.tenant_path,
            "tenant_scoped": self.tenant_scoped,
            "trusted_output": self.trusted_output,
            "trusted_fields": sorted(self.trusted_fields),
            "private": self.is_private,
            "readers_from": list(self.readers_from),
        }


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """A tool as a model is shown it: its name, what it does, and the JSON Schema of its
    arguments. Each model adapter turns these into its provider's wire format."""

    name: str
    description: str
    parameters: Mapping[str, Any]


# Given an operation key: the call's result if it happened, None if it did not.
Reconciler = Callable[[str], Any]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Tool:
    manifest: Manifest
    handler: Callable[..., Any]
    reconcile: Reconciler | None = None
    takes_operation_key: bool = False
    # An ``async def`` handler: ``invoke`` returns a coroutine (``Gate.acall`` awaits it).
    is_async: bool = False

    @property
    def name(self) -> str:
        return self.manifest.name

    # Both made on the first call that needs them and kept: a registry of many tools pays
    # only for the ones an agent calls.
    @cached_property
    def validator(self) -> jsonschema.Draft202012Validator:
        import jsonschema

        return jsonschema.Draft202012Validator(dict(self.manifest.parameters))

    @cached_property
    def _proof(self) -> Check | None:
        return compile_schema(self.manifest.parameters)

    def validate(self, arguments: Mapping[str, Any]) -> None:
        instance = arguments if type(arguments) is dict else dict(arguments)
        proof = self._proof
        # The common case: proved valid without jsonschema (tether.tools.schema); anything
        # not proved, and every error message, is jsonschema's.
        if proof is not None and proof(instance):
            return
        if self.validator.is_valid(instance):  # valid after all, without collecting errors
            return
        # jsonschema quotes the offending value: a 10 MB string would make a 10 MB message,
        # which the model reads and the audit log keeps. Each problem is capped.
        problems = [
            _capped(f"{'/'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}")
            for e in sorted(self.validator.iter_errors(instance), key=lambda e: e.path)
        ][:20]
        if problems:
            raise InvalidArguments(self.name, problems)

    def invoke(self, arguments: Mapping[str, Any], operation_key: str) -> Any:
        """Call the handler (for an async tool: the coroutine, not yet awaited)."""
        if self.takes_operation_key:
            return self.handler(**arguments, operation_key=operation_key)
        return self.handler(**arguments)


def schema_from_function(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema for ``fn``'s parameters, built by pydantic from its type hints."""
    import pydantic

    hints = get_type_hints(fn, include_extras=True)  # keep Annotated[..., Field(...)] bounds
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name == OPERATION_KEY_PARAMETER:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigurationError(f"tool '{fn.__name__}' may not take *args or **kwargs")
        annotation = hints.get(name, Any)
        default = ... if param.default is param.empty else param.default
        fields[name] = (annotation, default)
    model = pydantic.create_model(
        fn.__name__, __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    schema: dict[str, Any] = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


def _takes_operation_key(fn: Callable[..., Any]) -> bool:
    try:
        return OPERATION_KEY_PARAMETER in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class Registry:
    """The tools an agent may call. A name that is not here is refused."""

    def __init__(self, pins: Mapping[str, str] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._pins: dict[str, str] = dict(pins or {})

    def add(
        self,
        manifest: Manifest,
        handler: Callable[..., Any],
        *,
        reconcile: Reconciler | None = None,
    ) -> Tool:
        if manifest.name in self._tools:
            raise ConfigurationError(
                f"tool '{manifest.name}' is already registered; use replace() to change it"
            )
        return self.replace(manifest, handler, reconcile=reconcile)

    def replace(
        self,
        manifest: Manifest,
        handler: Callable[..., Any],
        *,
        reconcile: Reconciler | None = None,
    ) -> Tool:
        tool = Tool(
            manifest,
            handler,
            reconcile,
            _takes_operation_key(handler),
            inspect.iscoroutinefunction(handler),
        )
        self._tools[manifest.name] = tool
        return tool

    @overload
    def tool(self, fn: F, /) -> F: ...

    @overload
    def tool(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        reconcile: Reconciler | None = None,
        **manifest_fields: Any,
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        reconcile: Reconciler | None = None,
        **manifest_fields: Any,
    ) -> F | Callable[[F], F]:
        """Register a typed function; usable as ``@registry.tool`` or ``@registry.tool(...)``.

        ``reconcile(operation_key)`` asks the outside system whether a call happened: it
        returns the call's result if it did, ``None`` if it did not, and raises if it cannot
        tell."""

        def register(f: F) -> F:
            for key in ("allowed_tenants", "sensitive_fields", "trusted_fields"):
                if manifest_fields.get(key) is not None:
                    manifest_fields[key] = frozenset(manifest_fields[key])
            if isinstance(manifest_fields.get("readers_from"), str):
                manifest_fields["readers_from"] = (manifest_fields["readers_from"],)
            elif manifest_fields.get("readers_from") is not None:
                manifest_fields["readers_from"] = tuple(manifest_fields["readers_from"])
            manifest = Manifest(
                name=name or f.__name__,
                description=description or inspect.getdoc(f) or "",
                parameters=schema_from_function(f),
                **manifest_fields,
            )
            self.add(manifest, f, reconcile=reconcile)
            return f

        return register(fn) if fn is not None else register

    def find(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def get(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is None:
            raise UnknownToolError(name)
        return tool

    def resolve(self, name: str, version: str | None = None) -> Tool:
        """The tool to run for a call, refusing unknown tools and drifted manifests."""
        tool = self.get(name)
        pinned = self._pins.get(name)
        if pinned is not None and pinned != tool.manifest.manifest_digest:
            raise ManifestDriftError(name, pinned, tool.manifest.manifest_digest)
        if version is not None and version != tool.manifest.version:
            raise ManifestDriftError(name, f"version {version}", f"version {tool.manifest.version}")
        return tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        return sorted(self._tools)

    def manifests(self) -> list[Manifest]:
        return [self._tools[n].manifest for n in self.names()]

    def pin(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """Pin the current manifests (all, or those named) and return every pin."""
        for n in names if names is not None else self.names():
            self._pins[n] = self.get(n).manifest.manifest_digest
        return dict(self._pins)

    @property
    def pins(self) -> dict[str, str]:
        return dict(self._pins)

    def tool_specs(self) -> list[ToolSpec]:
        """What a model is shown of each tool, sorted by name; adapters put it on the wire."""
        return [
            ToolSpec(name=m.name, description=m.description, parameters=m.parameters)
            for m in self.manifests()
        ]


PROBLEM_MAX = 300  # characters of one argument problem, as shown and recorded


def _capped(text: str) -> str:
    if len(text) <= PROBLEM_MAX:
        return text
    return f"{text[: PROBLEM_MAX - 40]}... ({len(text)} characters, cut)"
