"""The registry's tools as LangChain tools, to bind to a model or hand to ``create_agent``:
each describes its tool (name, description, JSON Schema) and refuses to run, since a
governed tool runs only through the gate (``tether.adapters.langgraph``)."""

from __future__ import annotations

from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from tether.errors import Denied
from tether.tools.registry import Registry

__all__ = ["langchain_tools"]


def langchain_tools(registry: Registry) -> list[BaseTool]:
    """LangChain tools describing each tool in ``registry`` (name, description, JSON Schema),
    to bind to a model or hand to ``create_agent``. Calling one directly is refused: the tool
    runs only through the gate (``GovernedToolNode``, ``TetherMiddleware``)."""

    def refuse(name: str) -> Any:
        def ungoverned(**_: Any) -> Any:
            raise Denied(
                f"tool '{name}' is governed by tether and runs only through its gate; add "
                "TetherMiddleware to the agent or route tool calls to a GovernedToolNode",
                reasons=("called outside the gate",),
            )

        return ungoverned

    return [
        StructuredTool.from_function(
            func=refuse(m.name),
            name=m.name,
            description=m.description or m.name,
            args_schema=dict(m.parameters),
        )
        for m in registry.manifests()
    ]
