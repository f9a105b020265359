"""A policy file is parsed strictly: a mistake is refused at load, saying what and where,
never accepted to fail (or pass) at the first call it judges (issue 22)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether import Gate, Manifest, MemoryStore, Policy, Registry, Risk
from tether.errors import ConfigurationError

HEAD = 'version = "p-1"\napprovers = ["reviewer-5"]\n'


def tool_with(constraint: str) -> str:
    return HEAD + f'[tools.refund]\nconstraints = [{{ argument = "amount", {constraint} }}]\n'


@pytest.mark.parametrize(
    ("constraint", "said"),
    [
        ('op = "matches", value = "[a-z"', "does not compile"),
        ('op = "matches", value = 5', "regular expression as a string"),
        ('op = "in", value = 5', "takes a list"),
        ('op = "<=", value = "100"', "compares numbers"),
        ('op = "<=", value = true', "compares numbers"),
    ],
)
def test_a_constraint_that_cannot_judge_is_refused_at_load(constraint: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=said) as refused:
        Policy.from_toml(tool_with(constraint))
    assert "tools.refund.constraints.0" in str(refused.value)


def test_constraints_that_can_judge_still_load() -> None:
    for constraint in (
        'op = "matches", value = "[A-Z]-[0-9]+"',
        'op = "in", value = [1, 2]',
        'op = "<=", value = 100',
    ):
        assert Policy.from_toml(tool_with(constraint)).version == "p-1"


def test_a_ttl_given_as_text_is_not_coerced() -> None:
    with pytest.raises(ConfigurationError, match="approval_ttl_seconds"):
        Policy.from_toml(HEAD + 'approval_ttl_seconds = "900"\n')
    assert Policy.from_toml(HEAD + "approval_ttl_seconds = 900\n").approval_ttl_s == 900


def test_a_file_name_given_as_a_string_is_read_as_the_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(HEAD)
    assert Policy.from_toml(str(path)).version == "p-1"
    with pytest.raises(ConfigurationError, match=r"cannot read policy file .*missing\.toml"):
        Policy.from_toml(str(tmp_path / "missing.toml"))


def registry_with_refund() -> Registry:
    registry = Registry()
    registry.add(
        Manifest(
            name="refund",
            risk=Risk.WRITE,
            parameters={
                "type": "object",
                "properties": {"amount": {"type": "number"}, "order_id": {"type": "string"}},
                "required": ["amount"],
                "additionalProperties": False,
            },
        ),
        lambda amount, order_id="", operation_key="": {"refunded": amount},
    )
    return registry


def test_a_tool_table_the_registry_does_not_have_is_refused_at_the_gate() -> None:
    policy = Policy.from_toml(HEAD + '[tools.refnud]\ndecision = "deny"\n')
    with pytest.raises(ConfigurationError, match=r"\[tools\.refnud\].*did you mean 'refund'"):
        Gate(registry_with_refund(), policy, MemoryStore())


def test_a_constraint_on_an_argument_the_tool_does_not_take_is_refused_at_the_gate() -> None:
    policy = Policy.from_toml(tool_with('op = "<=", value = 100').replace("amount", "amonut"))
    with pytest.raises(ConfigurationError, match=r"constraints\.0 .*'amonut'.*'amount'"):
        Gate(registry_with_refund(), policy, MemoryStore())


def test_a_flow_list_naming_a_missing_tool_is_refused_at_the_gate() -> None:
    policy = Policy.from_toml(HEAD + '[flow]\ntrusted_tools = ["refunds"]\n')
    with pytest.raises(ConfigurationError, match=r"trusted_tools 'refunds'"):
        Gate(registry_with_refund(), policy, MemoryStore())


def test_a_policy_naming_only_real_tools_and_arguments_builds_a_gate() -> None:
    policy = Policy.from_toml(tool_with('op = "<=", value = 100'))
    assert Gate(registry_with_refund(), policy, MemoryStore()).policy_version == "p-1"
