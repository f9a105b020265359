"""Resources and prompts through the gateway, as governed reads.

A server whose config says ``resources = true`` or ``prompts = true`` has them offered, the
way its tools are: **pinned** — each prompt and resource template is snapshotted like a tool
(its name, title, description, arguments or URI template, the server and its version; lock
keys ``server/prompt:NAME`` and ``server/template:NAME``), checked for poisoning at ``tether
mcp pin``, offered only as pinned, and refused once it drifts, saying what changed — and
**judged**: every ``resources/read`` and ``prompts/get`` is a call through the gate, as a
read (manifests ``<server>__read_resource`` and ``<server>__get_prompt``, risk ``read``,
readable by the principals of ``read_tenants``, or any): the policy decides it (a
``[policy.tools.<server>__read_resource]`` rule can constrain ``uri`` or ask), the ledger
and the audit log record it, and what comes back is screened (resource text that reads like
instructions gets the gate's warning first; the flags are in ``_meta["io.tether/outcome"]``)
and capped like a tool's result (64 KiB: the beginning of its texts, the size and digest of
the whole in ``_meta["io.tether/capped"]``). The resources a server lists are data, not
instructions: they pass through live (not pinned), except those whose title or description
looks poisoned, which are left out. A refusal is a JSON-RPC error carrying the reason.

The module is long because it is one feature end to end: the snapshots, the manifests, the
pins' checks, three listings, the routing of a URI and the two request handlers.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tether.core.digest import canonical_json
from tether.mcp.capped import CAPPED, WHOLE, cap_contents
from tether.mcp.config import ServerConfig, ToolConfig
from tether.mcp.pins import changes, poisoning_findings, tool_digest
from tether.tools.registry import Manifest, Registry, Risk

if TYPE_CHECKING:
    from tether.gate.plan import Outcome
    from tether.mcp.caller import Caller
    from tether.mcp.cancel import Cancels
    from tether.mcp.config import GatewayConfig
    from tether.mcp.pins import Lock
    from tether.mcp.upstream import Upstream

__all__ = ["PROMPT", "TEMPLATE", "Reads", "read_config", "read_snapshots"]

PROMPT = "prompt:"
TEMPLATE = "template:"
RESOURCE_RESULT = "io.tether/mcp-resource"
PROMPT_RESULT = "io.tether/mcp-prompt"
LISTENERS = 256

Shape = Callable[["Outcome"], dict[str, Any]]


class Host(Protocol):
    """What reads need of the gateway (``tether.mcp.gateway.Gateway``)."""

    config: GatewayConfig
    lock: Lock
    upstreams: dict[str, Upstream]
    cancels: Cancels

    def caller_for(self, ctx: Any, meta: Mapping[str, Any] | None = None) -> Caller: ...

    async def govern_read(
        self,
        caller: Caller,
        request_id: Any,
        name: str,
        arguments: dict[str, Any],
        meta: Mapping[str, Any],
        shape: Shape,
    ) -> dict[str, Any]: ...


def read_snapshots(upstream: Upstream) -> dict[str, dict[str, Any]]:
    """The pinned fields of the server's prompts and resource templates, in the tools'
    snapshot shape (so digests, changes and poisoning checks are the tools' own)."""

    def snap(key: str, item: Mapping[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": key,
            "title": item.get("title"),
            "description": item.get("description"),
            "inputSchema": spec,
            "outputSchema": None,
            "annotations": None,
            "server": {"id": upstream.id, "name": upstream.server_name},
            "version": upstream.server_version,
        }

    found: dict[str, dict[str, Any]] = {}
    for name, prompt in upstream.prompts.items():
        found[PROMPT + name] = snap(
            PROMPT + name, prompt, {"arguments": prompt.get("arguments") or []}
        )
    for name, template in upstream.templates.items():
        spec = {"uriTemplate": template.get("uriTemplate"), "mimeType": template.get("mimeType")}
        found[TEMPLATE + name] = snap(TEMPLATE + name, template, spec)
    return found


def read_config(server: ServerConfig, key: str) -> ToolConfig | None:
    """The review's view of a prompt or template the server's config offers (None: not
    one, or not offered)."""
    if (key.startswith(PROMPT) and server.prompts) or (
        key.startswith(TEMPLATE) and server.resources
    ):
        return ToolConfig(
            server=server.id, upstream_name=key, name=key, risk=Risk.READ, tenant_scoped=False
        )
    return None


def _template_pattern(template: str) -> re.Pattern[str]:
    """A URI template (RFC 6570) as a pattern its URIs match: a simple ``{x}`` one path
    segment, an operator expression (``{+x}``, ``{/x}``, ...) anything."""
    out = []
    for part in re.split(r"(\{[^}]*\})", template):
        if part.startswith("{") and part.endswith("}"):
            out.append(r".*" if part[1:2] in "+#/.;?&" and len(part) > 2 else r"[^/?#]+")
        else:
            out.append(re.escape(part))
    return re.compile("^" + "".join(out) + "$")


class Reads:
    """The gateway's resources and prompts: the manifests the gate judges them by, their
    pins, their listings and the handlers of their requests."""

    def __init__(self, gateway: Host) -> None:
        self.gw = gateway
        self.names: set[str] = set()  # the read manifests' names (never offered as tools)
        self.blocked: dict[str, str] = {}  # lock key -> why it is refused now
        # The clients that have listed these, by connection (the SDK makes a session object
        # per request, all sending on their connection's channel), told when a listing
        # changes; the most recent LISTENERS of them.
        self.listeners: dict[int, Any] = {}
        self._listed: tuple[str, str] | None = None
        self.subscribers: dict[str, dict[int, Any]] = {}  # uri -> connection -> session

    def servers(self, what: str) -> list[ServerConfig]:
        return [s for s in self.gw.config.servers.values() if getattr(s, what)]

    def build(self, registry: Registry) -> None:
        for server in self.servers("resources"):
            self._add(registry, server, "read_resource", {"uri": {"type": "string"}}, ["uri"])
        for server in self.servers("prompts"):
            args = {"type": "object", "additionalProperties": {"type": "string"}}
            self._add(
                registry,
                server,
                "get_prompt",
                {"name": {"type": "string"}, "arguments": args},
                ["name"],
            )

    def _add(
        self,
        registry: Registry,
        server: ServerConfig,
        what: str,
        props: dict[str, Any],
        required: list[str],
    ) -> None:
        name = f"{server.id}__{what}"
        manifest = Manifest(
            name=name,
            parameters={
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": False,
            },
            server_id=server.id,
            description=f"{what.replace('_', ' ')} on MCP server '{server.id}'",
            risk=Risk.READ,
            allowed_tenants=server.read_tenants,
            tenant_scoped=False,
        )
        upstream_id = server.id

        async def handler(**arguments: Any) -> Any:
            upstream = self.gw.upstreams[upstream_id]
            if what == "read_resource":
                got = await upstream.read_resource(arguments["uri"])
                contents = [c.model_dump(by_alias=True, exclude_none=True) for c in got.contents]
                whole = (got.meta or {}).get(WHOLE)
                return cap_contents(
                    {RESOURCE_RESULT: 1, "contents": contents},
                    manifest.max_result_bytes,
                    whole if isinstance(whole, Mapping) else None,
                )
            prompt = await upstream.get_prompt(arguments["name"], arguments.get("arguments"))
            body = prompt.model_dump(
                by_alias=True, exclude_none=True, include={"description", "messages"}
            )
            return {PROMPT_RESULT: 1, **body}

        handler.__name__ = name
        registry.add(manifest, handler)
        self.names.add(name)

    # -- pins -------------------------------------------------------------------------------
    def check(self, upstream: Upstream) -> None:
        """Block each of ``upstream``'s pinned prompts and templates that drifted or went."""
        current = read_snapshots(upstream)
        for key, pinned in self.gw.lock.tools.items():
            sid, _, item = key.partition("/")
            if sid != upstream.id or read_config(self.gw.config.servers[sid], item) is None:
                continue
            snap = current.get(item)
            if snap is None:
                self.blocked[key] = f"MCP server '{sid}' no longer offers {item}"
            elif tool_digest(snap) != pinned.digest:
                what = ", ".join(changes(pinned.snapshot, snap))
                self.blocked[key] = (
                    f"{item} changed on MCP server '{sid}' since it was pinned ({what}); it is "
                    "refused until an operator reviews it and pins it again (tether mcp pin)"
                )
            else:
                self.blocked.pop(key, None)

    def _pinned(self, prefix: str) -> list[tuple[str, Mapping[str, Any]]]:
        """(server id, pinned snapshot) of each offered, unblocked prompt or template."""
        found = []
        for key in sorted(self.gw.lock.tools):
            sid, _, item = key.partition("/")
            server = self.gw.config.servers.get(sid)
            if server is None or not item.startswith(prefix) or read_config(server, item) is None:
                continue
            if key not in self.blocked:
                found.append((sid, self.gw.lock.tools[key].snapshot))
        return found

    def _listen(self, session: Any) -> None:
        key = id(getattr(session, "_connection", session))
        self.listeners.pop(key, None)
        self.listeners[key] = session
        while len(self.listeners) > LISTENERS:
            del self.listeners[next(iter(self.listeners))]

    def _state(self) -> tuple[str, str]:
        return (
            canonical_json(self.prompts()),
            canonical_json([self.templates(), self.resources()]),
        )

    async def announce(self) -> None:
        """After an upstream's change: tell the clients whose prompt or resource listing is
        now different (a prompt that drifted is gone from it; resources pass through)."""
        before, after = self._listed, self._state()
        self._listed = after
        if before is None or before == after:
            return
        for key, session in list(self.listeners.items()):
            try:
                if before[0] != after[0]:
                    await session.send_prompt_list_changed()
                if before[1] != after[1]:
                    await session.send_resource_list_changed()
            except Exception:  # a client gone meanwhile: not told again
                self.listeners.pop(key, None)

    # -- listings ---------------------------------------------------------------------------
    def prompts(self) -> list[dict[str, Any]]:
        listed: dict[str, dict[str, Any]] = {}
        for _, snap in self._pinned(PROMPT):
            name = str(snap["name"]).removeprefix(PROMPT)
            item = {"name": name, "arguments": snap["inputSchema"]["arguments"]}
            item.update({k: snap[k] for k in ("title", "description") if snap.get(k)})
            listed.setdefault(name, item)  # the first server (by id) offering a name wins
        return list(listed.values())

    def templates(self) -> list[dict[str, Any]]:
        out = []
        for _, snap in self._pinned(TEMPLATE):
            spec = snap["inputSchema"]
            item = {
                "name": str(snap["name"]).removeprefix(TEMPLATE),
                "uriTemplate": spec["uriTemplate"],
            }
            item.update({k: snap[k] for k in ("title", "description") if snap.get(k)})
            if spec.get("mimeType"):
                item["mimeType"] = spec["mimeType"]
            out.append(item)
        return out

    def resources(self) -> list[dict[str, Any]]:
        out = []
        for server in self.servers("resources"):
            upstream = self.gw.upstreams.get(server.id)
            for item in upstream.resources if upstream is not None else []:
                text = {k: item.get(k) for k in ("title", "description")}
                if not poisoning_findings(text):
                    out.append(item)
        return out

    def prompt_server(self, name: str) -> str | None:
        for sid, snap in self._pinned(PROMPT):
            if snap["name"] == PROMPT + name:
                return sid
        return None

    def resource_server(self, uri: str) -> str | None:
        """The server a URI is read from: one that lists it, or one with a pinned template
        it matches."""
        for server in self.servers("resources"):
            upstream = self.gw.upstreams.get(server.id)
            if upstream is not None and any(r.get("uri") == uri for r in upstream.resources):
                return server.id
        for sid, snap in self._pinned(TEMPLATE):
            if _template_pattern(str(snap["inputSchema"]["uriTemplate"])).match(uri):
                return sid
        return None

    # -- the requests -----------------------------------------------------------------------
    def register(self, server: Any) -> None:
        """Add the read handlers to the gateway's MCP server (only what the config offers)."""
        import mcp_types

        if self.servers("resources"):
            server.add_request_handler(
                "resources/list",
                mcp_types.PaginatedRequestParams,
                self._on(mcp_types.ListResourcesResult, lambda: {"resources": self.resources()}),
            )
            server.add_request_handler(
                "resources/templates/list",
                mcp_types.PaginatedRequestParams,
                self._on(
                    mcp_types.ListResourceTemplatesResult,
                    lambda: {"resourceTemplates": self.templates()},
                ),
            )
            server.add_request_handler(
                "resources/read", mcp_types.ReadResourceRequestParams, self._read
            )
            for method, on in (("resources/subscribe", True), ("resources/unsubscribe", False)):
                params = (
                    mcp_types.SubscribeRequestParams if on else mcp_types.UnsubscribeRequestParams
                )
                server.add_request_handler(method, params, self._subscription(on))
            for upstream_id in (s.id for s in self.servers("resources")):
                upstream = self.gw.upstreams.get(upstream_id)
                if upstream is not None:
                    upstream.on_updated = self._updated
        if self.servers("prompts"):
            server.add_request_handler(
                "prompts/list",
                mcp_types.PaginatedRequestParams,
                self._on(mcp_types.ListPromptsResult, lambda: {"prompts": self.prompts()}),
            )
            server.add_request_handler("prompts/get", mcp_types.GetPromptRequestParams, self._get)
        if self.servers("prompts") or self.servers("resources"):
            server.add_request_handler(
                "completion/complete", mcp_types.CompleteRequestParams, self._complete
            )

    def _on(
        self, model: Any, listing: Callable[[], dict[str, Any]]
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        async def handle(ctx: Any, params: Any) -> Any:
            self._listen(ctx.session)
            if self._listed is None:
                self._listed = self._state()
            return model.model_validate(listing())

        return handle

    async def _read(self, ctx: Any, params: Any) -> Any:
        import mcp_types

        uri = str(params.uri)
        sid = self.resource_server(uri)
        if sid is None:
            _refuse(f"tether: no offered resource or pinned resource template matches {uri!r}")
        assert sid is not None
        answer = await self._judged(
            ctx, params, f"{sid}__read_resource", {"uri": uri}, _resource_shape
        )
        return mcp_types.ReadResourceResult.model_validate(answer)

    async def _get(self, ctx: Any, params: Any) -> Any:
        import mcp_types

        name = str(params.name)
        sid = self.prompt_server(name)
        if sid is None:
            blocked = [
                why for key, why in self.blocked.items() if key.endswith("/" + PROMPT + name)
            ]
            _refuse(blocked[0] if blocked else f"tether: no pinned prompt named {name!r}")
        assert sid is not None
        arguments: dict[str, Any] = {"name": name}
        if params.arguments:
            arguments["arguments"] = dict(params.arguments)
        answer = await self._judged(ctx, params, f"{sid}__get_prompt", arguments, _prompt_shape)
        return mcp_types.GetPromptResult.model_validate(answer)

    def _subscription(self, on: bool) -> Callable[[Any, Any], Awaitable[Any]]:
        """``resources/subscribe`` (or ``unsubscribe``) for an offered resource: passed to
        its server once, the client remembered (or forgotten) for its updates."""
        import mcp_types

        async def handle(ctx: Any, params: Any) -> Any:
            uri = str(params.uri)
            sid = self.resource_server(uri)
            if sid is None:
                _refuse(f"tether: no offered resource or pinned resource template matches {uri!r}")
            assert sid is not None
            clients = self.subscribers.setdefault(uri, {})
            key = id(getattr(ctx.session, "_connection", ctx.session))
            first, last = not clients, len(clients) == 1 and key in clients
            if on:
                clients[key] = ctx.session
            else:
                clients.pop(key, None)
            if (on and first) or (not on and last):
                await self.gw.upstreams[sid].subscribe(uri, on)
            return mcp_types.EmptyResult()

        return handle

    async def _updated(self, uri: str) -> None:
        for key, session in list(self.subscribers.get(uri, {}).items()):
            try:
                await session.send_resource_updated(uri)
            except Exception:  # a client gone: not told again
                self.subscribers[uri].pop(key, None)

    async def _complete(self, ctx: Any, params: Any) -> Any:
        """Argument completions, passed through for a pinned, unblocked prompt or resource
        template only (a suggestion is data the client shows, not a call that acts)."""
        ref = params.ref
        sid: str | None = None
        if getattr(ref, "type", None) == "ref/prompt":
            sid = self.prompt_server(str(ref.name))
        else:
            uri = str(getattr(ref, "uri", ""))
            sid = next(
                (
                    s
                    for s, snap in self._pinned(TEMPLATE)
                    if snap["inputSchema"]["uriTemplate"] == uri
                ),
                None,
            )
        if sid is None:
            _refuse("tether: completions are offered only for pinned prompts and templates")
        assert sid is not None
        return await self.gw.upstreams[sid].complete(params)

    async def _judged(
        self, ctx: Any, params: Any, tool: str, arguments: dict[str, Any], shape: Shape
    ) -> dict[str, Any]:
        meta = params.meta if isinstance(params.meta, dict) else {}
        caller = self.gw.caller_for(ctx, meta)
        with self.gw.cancels.watching(ctx):  # its cancellation goes to the server
            answer = await self.gw.govern_read(caller, ctx.request_id, tool, arguments, meta, shape)
        if answer.get("isError"):
            text = "\n".join(b.get("text", "") for b in answer.get("content") or [])
            _refuse(text, answer.get("_meta"))
        return answer


def _outcome_meta(outcome: Outcome) -> dict[str, Any]:
    from tether.mcp.wire import OUTCOME_META

    return {
        OUTCOME_META: {
            "operation_key": outcome.operation_key,
            "status": outcome.status.value,
            "replayed": outcome.replayed,
            "policy_decision": outcome.policy_decision,
            "flags": list(outcome.flags),
        }
    }


def _resource_shape(outcome: Outcome) -> dict[str, Any]:
    from tether.core.screening import INJECTION_FLAG

    recorded = outcome.result if isinstance(outcome.result, Mapping) else {}
    contents = [dict(c) for c in recorded.get("contents") or []]
    if INJECTION_FLAG in outcome.flags:
        warning = outcome.text.split("\n", 1)[0]
        for item in contents:
            if isinstance(item.get("text"), str):
                item["text"] = warning + "\n" + item["text"]
                break
    meta = _outcome_meta(outcome)
    if isinstance(recorded.get(CAPPED), Mapping):
        meta[CAPPED] = dict(recorded[CAPPED])  # cut to the read's cap: what the whole was
    return {"contents": contents, "_meta": meta}


def _prompt_shape(outcome: Outcome) -> dict[str, Any]:
    # A prompt is instructions by design: screening's flags are reported, nothing is changed.
    recorded = outcome.result if isinstance(outcome.result, Mapping) else {}
    body: dict[str, Any] = {"messages": list(recorded.get("messages") or [])}
    if recorded.get("description"):
        body["description"] = recorded["description"]
    body["_meta"] = _outcome_meta(outcome)
    return body


def _refuse(text: str, meta: Any = None) -> None:
    import mcp_types
    from mcp.shared.exceptions import MCPError

    raise MCPError(mcp_types.INVALID_REQUEST, text, meta)
