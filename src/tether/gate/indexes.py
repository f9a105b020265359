"""The provenance index of a run, fed and rebuilt from what the store holds.

The gate feeds a run's index at every dispatch (``learn``); a process that does not have it
rebuilds it from durable rows (``rebuild_index``: the run's recorded inputs and its effects'
results), so a run resumed elsewhere is judged by what the same run saw.
"""

from __future__ import annotations

import json
from typing import Any

from tether.core.ledger import EffectStatus
from tether.core.screening import INJECTION_FLAG, screen_result
from tether.policy.flow import FlowPolicy
from tether.policy.provenance import Origin, ProvenanceIndex
from tether.store.base import Tx
from tether.tools.registry import Registry, Tool

# The source under which ``Gate.record_input`` keeps an application's tool allow-list.
TOOLS_SOURCE = "allowed_tools"


def rebuild_index(tx: Tx, run_id: str, flow: FlowPolicy, registry: Registry) -> ProvenanceIndex:
    """The run's index as the transaction's rows give it."""
    index = ProvenanceIndex(flow.trusted_values)
    for source, body in tx.inputs(run_id):
        if source == TOOLS_SOURCE:
            index.allow_tools(json.loads(body))
        else:
            index.add_trusted(body, user=True)
    effects = tx.run_effects(run_id)
    for effect in effects:
        known = registry.find(effect.tool_name)
        # Which earlier calls followed a link is not stored: every call of a tool that may
        # follow links counts against the budget (over-counting fails closed).
        follows = known is not None and flow.follows_links(known.manifest)
        if effect.status is not EffectStatus.FAILED:
            index.note_call(
                effect.tool_name, effect.argument_digest, effect.call_id, followed=follows
            )
        if effect.result_json is None:
            continue
        value = json.loads(effect.result_json)
        learn(index, flow, known, effect.call_id, effect.tool_name, value, effect.result_json)
    index.effects = len(effects)
    return index


def learn(
    index: ProvenanceIndex,
    flow: FlowPolicy,
    tool: Tool | None,
    call_id: str,
    tool_name: str,
    value: Any,
    result_json: str,
    flags: tuple[str, ...] | None = None,
) -> bool:
    """Feed one recorded result to the index, as at dispatch; whether it is trusted.
    ``flags``: the result's screening flags, if already known."""
    private, readers = False, tuple[str, ...]()
    if tool is None:  # no longer registered: nothing vouches for it
        trusted, fields, limit = False, frozenset[str](), 65_536
    else:
        trusted, fields = flow.output_trust(tool.manifest)
        private, readers = flow.output_readers(tool.manifest)
        limit = tool.manifest.max_result_bytes
    if flags is None:
        text = value if isinstance(value, str) else result_json
        flags = screen_result(text, limit).flags
    flagged = not trusted and INJECTION_FLAG in flags
    index.add_output(
        Origin(call_id, tool_name),
        value,
        trusted=trusted,
        trusted_fields=fields,
        flagged=flagged,
        private=private,
        readers_from=readers,
        recorded=result_json,  # a result read again in the run is not learned again
    )
    return trusted
