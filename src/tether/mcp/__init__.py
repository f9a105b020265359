"""The MCP gateway (``pip install -e '.[mcp]'``): any MCP server's tools behind tether's
gate, with no change to the agent.

- ``config``: ``gateway.toml`` — upstream servers, the tools offered and their manifests,
  who calls, the policy;
- ``pins``: tool digests, the lock file beside the config, poisoning findings;
- ``upstream``: one connection to an upstream server (the SDK's client);
- ``gateway``: the MCP server whose ``tools/call`` passes the gate (``tether mcp serve``);
- ``http``: the gateway over streamable HTTP, callers authenticated by credential;
- ``review``: what ``tether mcp pin`` and ``inspect`` show; ``scaffold``: ``tether mcp init``;
- ``reads``: resources and prompts as governed reads; ``relay``: progress, logging,
  sampling, elicitation and roots passed to the calling client;
- ``capped``: results over a tool's cap; ``pipe``: the upstream stdio transport;
- ``liveness``: which gateway processes on a SQLite store are alive (a restart settles what
  a killed one left ``dispatched``);
- ``client``: ``GovernedSession``, the same pipeline around an ``mcp.ClientSession``.

Names load on first use, so ``import tether.mcp`` does not import the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.mcp.client import GovernedSession
    from tether.mcp.config import GatewayConfig, load_config
    from tether.mcp.gateway import Gateway

__all__ = ["Gateway", "GatewayConfig", "GovernedSession", "load_config"]

_WHERE = {
    "Gateway": "tether.mcp.gateway",
    "GatewayConfig": "tether.mcp.config",
    "GovernedSession": "tether.mcp.client",
    "load_config": "tether.mcp.config",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
