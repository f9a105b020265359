"""``Policy.can_ask``: False only where no call of the tool could be asked about, checked
against the verdict ``decide`` actually gives, over tiers, tool rules, irreversible tools and
screening flags (an entrance skips the store on its word)."""

from __future__ import annotations

import itertools

import pytest

from tether import Policy, Principal, Registry, Risk
from tether.core.verdicts import Verdict
from tether.policy.constraints import ToolRule
from tether.policy.rules import decide
from tether.tools.registry import Manifest

PRINCIPAL = Principal(subject="u", tenant="acme", scopes=frozenset({"s"}))


def manifest(risk: Risk) -> Manifest:
    registry = Registry()

    @registry.tool(name=f"t_{risk.value}", risk=risk)
    def tool(x: str) -> str:
        """A tool."""
        return x

    return registry.get(f"t_{risk.value}").manifest


@pytest.mark.parametrize(
    ("risk", "rule", "on_injection"),
    list(itertools.product(Risk, (None, Verdict.ALLOW, Verdict.ASK, Verdict.DENY), Verdict)),
)
def test_can_ask_is_false_only_where_no_verdict_is_an_ask(
    risk: Risk, rule: Verdict | None, on_injection: Verdict
) -> None:
    m = manifest(risk)
    tools = {} if rule is None else {m.name: ToolRule(verdict=rule)}
    policy = Policy(version="v", approvers=frozenset({"a"}), tools=tools, on_injection=on_injection)
    verdicts = {
        decide(policy, PRINCIPAL, m, {"x": "hi"}, flags).verdict
        for flags in ((), ("looks like an instruction",))
    }
    if Verdict.ASK in verdicts:
        assert policy.can_ask(m)
    if not policy.can_ask(m):
        assert Verdict.ASK not in verdicts


def test_an_allowed_read_tool_under_the_default_policy_cannot_ask() -> None:
    policy = Policy(version="v", approvers=frozenset({"a"}))
    assert not policy.can_ask(manifest(Risk.READ))
    assert policy.can_ask(manifest(Risk.IRREVERSIBLE))
