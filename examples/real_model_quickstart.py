"""The same gated agent driven by a real model: OpenAI Chat Completions and Anthropic Messages.

Needs `pip install -e '.[openai,anthropic]'` and, for each provider you want to try,
its key: OPENAI_API_KEY / ANTHROPIC_API_KEY. OPENAI_BASE_URL / ANTHROPIC_BASE_URL point
the SDKs at another endpoint (a proxy, a compatible server); OPENAI_MODEL /
ANTHROPIC_MODEL choose the model. A provider without a key is skipped.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

from tether import Gate, Model, Policy, Principal, Registry, Risk, Runner, open_store

NOTES = {"todo": "ship the release notes on Friday"}
registry = Registry()


@registry.tool(risk=Risk.READ, required_scope="notes:read", tenant_scoped=False)
def read_note(title: str) -> dict[str, Any]:
    """Read one of the user's notes by its title."""
    return {"title": title, "body": NOTES.get(title, "(no such note)")}


def models() -> dict[str, Model]:
    """One model per provider whose API key is set; the SDKs are imported only if needed."""
    found: dict[str, Model] = {}
    if os.environ.get("OPENAI_API_KEY"):
        import openai

        from tether.models.openai import OpenAIChatModel

        openai_client = openai.OpenAI(
            api_key=os.environ["OPENAI_API_KEY"], base_url=os.environ.get("OPENAI_BASE_URL")
        )
        found["openai"] = OpenAIChatModel(
            os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), client=openai_client
        )
    if os.environ.get("ANTHROPIC_API_KEY"):
        import anthropic

        from tether.models.anthropic import AnthropicModel

        anthropic_client = anthropic.Anthropic(
            api_key=os.environ["ANTHROPIC_API_KEY"], base_url=os.environ.get("ANTHROPIC_BASE_URL")
        )
        name = os.environ.get("ANTHROPIC_MODEL", "claude-3-5-haiku-latest")
        found["anthropic"] = AnthropicModel(name, client=anthropic_client)
    return found


# Reads run without asking; this agent has nothing else to call.
policy = Policy(version="notes-1")
user = Principal(subject="user-1", tenant="acme", scopes=frozenset({"notes:read"}))

chosen = models()
if not chosen:
    print("no provider configured: set OPENAI_API_KEY and/or ANTHROPIC_API_KEY to try one")
with tempfile.TemporaryDirectory() as tmp:
    store = open_store(f"sqlite:///{Path(tmp) / 'tether.db'}")
    for provider, model in chosen.items():
        runner = Runner(Gate(registry, policy, store), model, system="Answer from the notes.")
        result = runner.start("What does my note 'todo' say?", user)
        print(f"{provider}: run {result.run_id} {result.status}")
        for step in result.steps:
            print(f"  [{step.index}] {step.kind:<10} {step.detail[:64]}")
        effects = store.list_effects(result.run_id)
        print(f"{provider}: {len(effects)} tool call(s) through the gate, final: {result.final!r}")
    store.close()
