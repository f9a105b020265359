"""Cedar policies for the data-flow decision, for teams that write Cedar (extra ``cedar``).

``[flow] cedar = '''...'''`` in a policy file (or ``FlowPolicy(cedar=CedarRules.from_text(...))``)
hands the verdict a flow rule would give to Cedar, evaluated by ``cedarpy`` on the same
labels. Each call is a request: principal ``Agent::"<subject>"``, action ``Action::"call"``,
resource ``Tool::"<name>"``, and a context:

- ``tier`` (``"write"``...) and ``tool``;
- ``arguments``: per argument, ``{trusted: Bool, trust: String}``, plus ``call_id`` and
  ``from_tool`` when its value first came from a call's untrusted output;
- ``untrusted``: the names of the arguments that are not trusted (a set);
- ``untrusted_output_seen``, ``flagged_output_seen``: what the run has seen so far.

Cedar answers permit or deny; tether needs three verdicts. A permit lets the call run
unattended (it relaxes the tier's verdict, as a flow rule's ``trusted = "allow"`` does); a
forbid annotated ``@tether("deny")`` denies it; anything else — a plain forbid, or no permit
— asks a human. The reasons name the deciding policies by their ``@id`` (else Cedar's own
ids), so an approval says which Cedar policy sent it. Tiers' denials, irreversible tools and
screening flags on the arguments apply after Cedar exactly as after flow rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tether.core.verdicts import Verdict
from tether.errors import ConfigurationError
from tether.policy.provenance import ArgumentProvenance, ProvenanceIndex
from tether.tools.registry import Manifest


@dataclass(frozen=True)
class CedarRules:
    """A parsed Cedar policy set and what tether reads from its annotations."""

    text: str
    policies: Any = field(repr=False, compare=False)  # cedarpy.PolicySet
    names: dict[str, str] = field(repr=False, compare=False)  # Cedar's id -> the @id
    denying: frozenset[str] = field(repr=False, compare=False)  # forbids marked deny

    @classmethod
    def from_text(cls, text: str) -> CedarRules:
        try:
            import cedarpy
        except ImportError:
            raise ConfigurationError(
                "the policy's flow rules are written in Cedar, which needs cedarpy: "
                "pip install -e '.[cedar]'"
            ) from None
        try:
            parsed = json.loads(cedarpy.policies_to_json_str(text))
            policies = cedarpy.PolicySet.from_str(text)
        except Exception as e:  # cedarpy raises its own errors for text that does not parse
            raise ConfigurationError(f"the Cedar policies do not parse: {e}") from e
        static: dict[str, Any] = parsed.get("staticPolicies", {})
        if not static:
            raise ConfigurationError("the Cedar policies are empty; write at least one permit")
        names: dict[str, str] = {}
        denying: set[str] = set()
        for pid, body in static.items():
            notes = body.get("annotations", {})
            names[pid] = notes.get("id", pid)
            verdict = notes.get("tether")
            if verdict not in (None, "deny", "ask"):
                raise ConfigurationError(
                    f"Cedar policy {names[pid]!r} says @tether({verdict!r}); use "
                    '@tether("deny") on a forbid that denies, or nothing (a forbid asks)'
                )
            if verdict == "deny":
                if body.get("effect") != "forbid":
                    raise ConfigurationError(
                        f'Cedar policy {names[pid]!r}: @tether("deny") belongs on a forbid'
                    )
                denying.add(pid)
        return cls(text=text, policies=policies, names=names, denying=frozenset(denying))

    def judge(
        self,
        subject: str,
        manifest: Manifest,
        labels: tuple[ArgumentProvenance, ...],
        index: ProvenanceIndex,
    ) -> tuple[Verdict, list[str]]:
        """Cedar's verdict on a call and the reasons naming its policies."""
        import cedarpy

        arguments: dict[str, Any] = {}
        for label in labels:
            entry: dict[str, Any] = {"trusted": label.trusted, "trust": label.trust.value}
            if label.origin is not None:
                entry.update(call_id=label.origin.call_id, from_tool=label.origin.tool)
            arguments[label.argument] = entry
        request = {
            "principal": {"type": "Agent", "id": subject},
            "action": {"type": "Action", "id": "call"},
            "resource": {"type": "Tool", "id": manifest.name},
            "context": {
                "tier": manifest.risk.value,
                "tool": manifest.name,
                "arguments": arguments,
                "untrusted": [label.argument for label in labels if not label.trusted],
                "untrusted_output_seen": index.first_untrusted is not None,
                "flagged_output_seen": index.flagged is not None,
            },
        }
        result = cedarpy.is_authorized(request, self.policies, [])
        errors = result.diagnostics.errors
        if errors:
            # A policy that failed to evaluate (a missing attribute without `has`) decided
            # nothing: a human looks rather than the call running on a half-read policy.
            return Verdict.ASK, [f"cedar: a policy could not be evaluated: {errors[0]}"]
        fired = [self.names.get(pid, pid) for pid in result.diagnostics.reasons]
        if result.allowed:
            return Verdict.ALLOW, [f"cedar: permitted by {', '.join(fired)}"]
        denied = [self.names[p] for p in result.diagnostics.reasons if p in self.denying]
        if denied:
            return Verdict.DENY, [f"cedar: forbidden by {', '.join(denied)}"]
        if fired:
            return Verdict.ASK, [f"cedar: forbidden by {', '.join(fired)}: ask"]
        return Verdict.ASK, ["cedar: no policy permits this call unattended: ask"]
