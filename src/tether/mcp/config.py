"""The gateway's configuration file (``gateway.toml``): which upstream MCP servers to reach,
which of their tools to offer under which tether manifest, who calls, and the policy.

Parsed with ``tomllib`` and checked by pydantic; unknown keys are errors (a misspelt
``risk`` must not quietly mean "read"), and every problem names the key it is about. A tool
an operator did not list here is never offered: risk comes from the operator, not from the
server's own annotations, which may only make a tool stricter (``effective_risk``).

    [gateway]
    db = "sqlite:////var/lib/tether/gateway.db"

    [principal]                      # who calls over stdio (over HTTP: the credential)
    subject = "desktop"
    tenant = "acme"

    [policy]                         # a policy file's keys, inline (or policy_file = "...")
    version = "gw-1"
    approvers = ["alice"]

    [servers.fs]
    command = "npx"
    args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"]

    [servers.fs.tools.read_text_file]
    risk = "read"

    [servers.fs.tools.write_file]
    risk = "write"

    [servers.docs]                   # resources and prompts, offered as governed reads
    url = "http://127.0.0.1:9000/mcp"
    resources = true
    prompts = true

    [budget]                         # per session: each MCP session is one tether run
    max_steps = 200
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

from tether.core.budget import Budget
from tether.core.principal import Principal
from tether.errors import ConfigurationError
from tether.policy.rules import Policy
from tether.tools.registry import Risk

__all__ = ["GatewayConfig", "ServerConfig", "ToolConfig", "effective_risk", "load_config"]

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_ORDER = [Risk.READ, Risk.SENSITIVE_READ, Risk.WRITE, Risk.ADMIN, Risk.IRREVERSIBLE]


@dataclass(frozen=True, kw_only=True)
class ToolConfig:
    """One upstream tool as the gateway offers it."""

    server: str
    upstream_name: str  # the tool's name on its server
    name: str  # the name the gateway offers it under (and tether's manifest name)
    risk: Risk
    required_scope: str | None = None
    allowed_tenants: frozenset[str] | None = None
    tenant_path: str | None = None
    tenant_scoped: bool | None = None
    max_result_bytes: int = 65_536
    sensitive_fields: frozenset[str] = frozenset()
    timeout_s: float | None = None
    cost: int = 0

    @property
    def key(self) -> str:
        """The tool's name in the lock file: ``server/upstream name``."""
        return f"{self.server}/{self.upstream_name}"


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """An upstream MCP server: a command started over stdio, or a streamable-HTTP URL."""

    id: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] | None = None
    tools: Mapping[str, ToolConfig]  # by upstream name
    # Its resources and prompts offered as governed reads (``tether.mcp.reads``), and the
    # tenants whose principals may read them (None: any).
    resources: bool = False
    prompts: bool = False
    read_tenants: frozenset[str] | None = None
    # How long a call a client cancelled waits for the server's answer before it is
    # recorded unknown (``tether.mcp.cancel``).
    cancel_wait_s: float = 5.0

    def describe(self) -> str:
        return self.url if self.url else " ".join((self.command or "", *self.args)).strip()


@dataclass(frozen=True, kw_only=True)
class GatewayConfig:
    path: Path
    name: str
    db: str | None
    principal: Principal | None
    policy: Policy
    servers: Mapping[str, ServerConfig]
    http_host: str = "127.0.0.1"
    http_port: int = 8765
    budget: Budget | None = None  # per session (each session is one tether run)

    @property
    def lock_path(self) -> Path:
        """The lock file beside the config: ``gateway.toml`` -> ``gateway.lock.json``."""
        return self.path.with_name(self.path.stem + ".lock.json")

    def tools(self) -> list[ToolConfig]:
        return [t for s in self.servers.values() for t in s.tools.values()]


def effective_risk(configured: Risk, annotations: Mapping[str, Any] | None) -> Risk:
    """The operator's tier, made stricter (never laxer) by what the server says of its
    tool: a tool that says it is not read-only is at least a write, one that says it is
    destructive is irreversible. A server saying ``readOnlyHint: true`` changes nothing —
    the specification says a client must not trust hints from an untrusted server, so they
    are only allowed to cost the server, never to buy it a laxer gate."""
    found = _ORDER.index(configured)
    notes = annotations or {}
    if notes.get("readOnlyHint") is False:
        found = max(found, _ORDER.index(Risk.WRITE))
    if notes.get("destructiveHint") is True and notes.get("readOnlyHint") is not True:
        found = max(found, _ORDER.index(Risk.IRREVERSIBLE))
    return _ORDER[found]


# -- the file's shape ------------------------------------------------------------------------
class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class _ToolSpec(_Strict):
    risk: Risk
    name: str | None = None
    scope: str | None = None
    allowed_tenants: list[str] | None = None
    tenant_path: str | None = None
    tenant_scoped: bool | None = None
    max_result_bytes: int = pydantic.Field(default=65_536, gt=0)
    sensitive_fields: list[str] = []
    timeout_seconds: float | None = pydantic.Field(default=None, gt=0)
    cost: int = pydantic.Field(default=0, ge=0)

    @pydantic.field_validator("risk", mode="before")
    @classmethod
    def _risk(cls, value: Any) -> Any:
        try:
            return Risk.parse(value)
        except ConfigurationError as e:
            raise ValueError(str(e)) from None


class _ServerSpec(_Strict):
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    tools: dict[str, _ToolSpec] = {}
    resources: bool = False
    prompts: bool = False
    read_tenants: list[str] | None = None
    cancel_wait_seconds: float = pydantic.Field(default=5.0, gt=0)

    @pydantic.model_validator(mode="after")
    def _one_transport(self) -> _ServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError('give exactly one of command = "..." (stdio) or url = "..." (HTTP)')
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        return self


class _PrincipalSpec(_Strict):
    subject: str
    tenant: str
    scopes: list[str] = []


class _BudgetSpec(_Strict):
    max_steps: int | None = pydantic.Field(default=None, ge=0)
    max_cost: int | None = pydantic.Field(default=None, ge=0)
    max_bytes: int | None = pydantic.Field(default=None, ge=0)


class _GatewaySpec(_Strict):
    name: str = "tether-gateway"
    db: str | None = None
    host: str = "127.0.0.1"
    port: int = pydantic.Field(default=8765, ge=0, le=65535)


class _File(_Strict):
    gateway: _GatewaySpec = _GatewaySpec()
    principal: _PrincipalSpec | None = None
    policy: dict[str, Any] | None = None
    policy_file: str | None = None
    budget: _BudgetSpec | None = None
    servers: dict[str, _ServerSpec]


def load_config(path: str | Path) -> GatewayConfig:
    """The gateway configuration in ``path``, or a ConfigurationError saying what is wrong."""
    path = Path(path).resolve()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(
            f"no gateway config at {path}; write one (see the README's MCP gateway section)"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"cannot read gateway config {path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigurationError(f"gateway config {path} is not valid TOML: {e}") from e
    return parse_config(raw, path)


def parse_config(raw: Mapping[str, Any], path: Path) -> GatewayConfig:
    try:
        spec = _File.model_validate(raw)
    except pydantic.ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(file)'}: {err['msg']}"
            for err in e.errors()
        )
        raise ConfigurationError(f"gateway config {path} is invalid: {problems}") from e
    if not spec.servers:
        raise ConfigurationError(f"gateway config {path} names no [servers.<id>]; add one")
    servers: dict[str, ServerConfig] = {}
    offered: dict[str, str] = {}
    for sid, server in spec.servers.items():
        if not _NAME.match(sid):
            raise ConfigurationError(
                f"gateway config {path}: server id {sid!r} must be letters, digits, '_' or '-'"
            )
        tools = _tools(path, sid, server.tools, offered)
        servers[sid] = ServerConfig(
            id=sid,
            command=server.command,
            args=tuple(server.args),
            env=server.env,
            cwd=server.cwd,
            url=server.url,
            headers=server.headers,
            tools=tools,
            resources=server.resources,
            prompts=server.prompts,
            read_tenants=None if server.read_tenants is None else frozenset(server.read_tenants),
            cancel_wait_s=server.cancel_wait_seconds,
        )
    return GatewayConfig(
        path=path,
        name=spec.gateway.name,
        db=spec.gateway.db,
        principal=None
        if spec.principal is None
        else Principal(
            subject=spec.principal.subject,
            tenant=spec.principal.tenant,
            scopes=frozenset(spec.principal.scopes),
        ),
        policy=_policy(spec, path),
        servers=servers,
        http_host=spec.gateway.host,
        http_port=spec.gateway.port,
        budget=None if spec.budget is None else Budget(**spec.budget.model_dump()),
    )


def tool_configs(server_id: str, tools: Mapping[str, Mapping[str, Any]]) -> dict[str, ToolConfig]:
    """Tool tables as in a config file (``{"write_file": {"risk": "write"}}``), checked the
    same way: for the in-process wrapper (``tether.mcp.client``)."""
    try:
        specs = {k: _ToolSpec.model_validate(v) for k, v in tools.items()}
    except pydantic.ValidationError as e:
        raise ConfigurationError(f"MCP tools for '{server_id}' are invalid: {e}") from e
    return _tools(Path("(in-process)"), server_id, specs, {})


def _tools(
    path: Path, sid: str, specs: Mapping[str, _ToolSpec], offered: dict[str, str]
) -> dict[str, ToolConfig]:
    tools: dict[str, ToolConfig] = {}
    for upstream, t in specs.items():
        name = t.name or upstream
        where = f"servers.{sid}.tools.{upstream}"
        if not _NAME.match(name):
            raise ConfigurationError(
                f"gateway config {path}: {where}: the offered name {name!r} must be "
                "letters, digits, '_' or '-'; set name = \"...\""
            )
        if name in offered:
            raise ConfigurationError(
                f"gateway config {path}: {where} and {offered[name]} would both be offered "
                f"as '{name}'; give one of them name = \"...\""
            )
        offered[name] = where
        tools[upstream] = ToolConfig(
            server=sid,
            upstream_name=upstream,
            name=name,
            risk=t.risk,
            required_scope=t.scope,
            allowed_tenants=frozenset(t.allowed_tenants) if t.allowed_tenants is not None else None,
            tenant_path=t.tenant_path,
            tenant_scoped=t.tenant_scoped,
            max_result_bytes=t.max_result_bytes,
            sensitive_fields=frozenset(t.sensitive_fields),
            timeout_s=t.timeout_seconds,
            cost=t.cost,
        )
    return tools


def _policy(spec: _File, path: Path) -> Policy:
    if spec.policy is not None and spec.policy_file is not None:
        raise ConfigurationError(
            f"gateway config {path} has both [policy] and policy_file; keep one"
        )
    if spec.policy_file is not None:
        file = (path.parent / spec.policy_file).resolve()
        if not file.is_file():
            raise ConfigurationError(f"gateway config {path}: policy_file {file} does not exist")
        return Policy.from_toml(file)
    if spec.policy is not None:
        try:
            return Policy.from_dict(spec.policy)
        except ConfigurationError as e:
            raise ConfigurationError(f"gateway config {path}: [policy]: {e}") from e
    raise ConfigurationError(
        f'gateway config {path} has no policy: add a [policy] table (version = "...", '
        'approvers = [...]) or policy_file = "policy.toml"; without one every call is refused'
    )
