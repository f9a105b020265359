"""The policy file's shape, checked by pydantic: imported only when a file is parsed.

``Policy.from_toml`` reads the TOML; this module says what may be in it (unknown keys are
errors, so a misspelt ``decison`` cannot silently mean "no rule") and gives the ``Policy``'s fields.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic

from tether.core.verdicts import Verdict
from tether.errors import ConfigurationError
from tether.policy.cedar import CedarRules
from tether.policy.constraints import DEFAULT_TIERS, Constraint, ConstraintOp, ToolRule
from tether.policy.flow import FlowPolicy, FlowRule, IntentRule, Marking, SessionRule
from tether.policy.provenance import Check
from tether.policy.values import destinations
from tether.tools.registry import Risk


def parse_policy_file(raw: dict[str, Any]) -> dict[str, Any]:
    """The ``Policy`` fields a parsed TOML document describes, or a ConfigurationError
    saying what in it is wrong. (``Policy.from_toml`` builds the policy from them: this module
    knows the file's shape, not the policy's rules.)"""
    try:
        spec = _PolicyFile.model_validate(raw)
    except pydantic.ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise ConfigurationError(f"policy file is invalid: {problems}") from e
    return spec.to_fields()


class _ConstraintSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    argument: str
    op: ConstraintOp
    value: Any

    @pydantic.model_validator(mode="after")
    def _value_fits_op(self) -> _ConstraintSpec:
        # Refused here, at load, rather than at the first call the constraint judges.
        op, value = self.op, self.value
        if op == "matches":
            if not isinstance(value, str):
                raise ValueError(f"'matches' takes a regular expression as a string, not {value!r}")
            try:
                re.compile(value)
            except re.error as e:
                raise ValueError(f"the regular expression {value!r} does not compile: {e}") from e
        elif op in ("in", "not_in") and not isinstance(value, list):
            raise ValueError(f"{op!r} takes a list of values, e.g. value = [{value!r}]")
        elif op in ("<", "<=", ">", ">=") and (
            isinstance(value, bool) or not isinstance(value, int | float)
        ):
            raise ValueError(f"{op!r} compares numbers; {value!r} is not one")
        return self


class _ToolSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    decision: Verdict | None = None
    approvers: list[str] | None = None
    constraints: list[_ConstraintSpec] = []


class _FlowRuleSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    trusted: Verdict | None = None
    untrusted: Verdict = Verdict.ASK
    unknown: Verdict | None = None
    arguments: dict[str, Check] = {}
    default: Check = Check.IDENTIFIERS
    egress: list[str] = []
    # true: links on any host; a list: links on these hosts (and under them)
    follow_links: bool | list[str] = False
    audience: list[str] = []
    intent: list[str] = []
    together: list[list[str]] = []

    def to_rule(self) -> FlowRule:
        follow = self.follow_links
        hosts = ["*"] if follow is True else [] if follow is False else follow
        return FlowRule(
            trusted=self.trusted,
            untrusted=self.untrusted,
            unknown=self.unknown,
            arguments=dict(self.arguments),
            default=self.default,
            egress=tuple(self.egress),
            follow_links=frozenset(h.strip().lower().removeprefix("www.") for h in hosts),
            audience=tuple(self.audience),
            intent=tuple(self.intent),
            together=tuple(tuple(g) for g in self.together),
        )


class _SessionSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    after: Literal["untrusted_output", "flagged_output"]
    tools: list[str] = []
    tiers: list[Risk] = []
    egress: bool = False
    verdict: Verdict = Verdict.ASK


class _IntentSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    after: Literal["untrusted_output", "always"] = "untrusted_output"
    tiers: list[Risk] = [Risk.WRITE, Risk.ADMIN, Risk.IRREVERSIBLE]
    tools: list[str] = []
    verdict: Verdict = Verdict.ASK


class _FlowSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    tiers: dict[Risk, _FlowRuleSpec] = {}
    tools: dict[str, _FlowRuleSpec] = {}
    allow_domains: list[str] = []
    trusted_values: list[str] = []
    trusted_tools: list[str] = []
    untrusted_tools: list[str] = []
    trusted_fields: dict[str, list[str]] = {}
    session: list[_SessionSpec] = []
    intent: _IntentSpec | None = None
    owner: list[str] = []
    private_tools: list[str] = []
    readers_from: dict[str, list[str]] = {}
    links_budget: int = pydantic.Field(default=5, ge=0, strict=True)
    marking: Marking = Marking.DELIMIT
    cedar: str | None = None  # Cedar policies deciding instead (tether.policy.cedar)

    def to_flow(self) -> FlowPolicy:
        both = set(self.trusted_tools) & set(self.untrusted_tools)
        if both:
            raise ConfigurationError(
                f"policy file: flow lists {', '.join(sorted(both))} as both trusted_tools and "
                "untrusted_tools; keep each tool in one"
            )
        return FlowPolicy(
            tiers={risk: spec.to_rule() for risk, spec in self.tiers.items()},
            tools={name: spec.to_rule() for name, spec in self.tools.items()},
            allow_domains=frozenset(
                d.strip().lower().removeprefix("www.") for d in self.allow_domains
            ),
            trusted_values=tuple(self.trusted_values),
            trusted_tools=frozenset(self.trusted_tools),
            untrusted_tools=frozenset(self.untrusted_tools),
            trusted_fields={k: frozenset(v) for k, v in self.trusted_fields.items()},
            session=tuple(
                SessionRule(
                    after=s.after,
                    tools=tuple(s.tools),
                    tiers=tuple(s.tiers),
                    egress=s.egress,
                    verdict=s.verdict,
                )
                for s in self.session
            ),
            intent=IntentRule(
                after=self.intent.after,
                tiers=tuple(self.intent.tiers),
                tools=tuple(self.intent.tools),
                verdict=self.intent.verdict,
            )
            if self.intent is not None
            else None,
            owner=frozenset(destinations(self.owner)),
            private_tools=frozenset(self.private_tools),
            readers_from={k: tuple(v) for k, v in self.readers_from.items()},
            links_budget=self.links_budget,
            marking=self.marking,
            cedar=CedarRules.from_text(self.cedar) if self.cedar is not None else None,
        )


class _PolicyFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    version: str
    approvers: list[str] = []
    approval_ttl_seconds: float = pydantic.Field(default=3600.0, gt=0, strict=True)
    on_injection: Verdict = Verdict.DENY
    tiers: dict[Risk, Verdict] = {}
    tools: dict[str, _ToolSpec] = {}
    flow: _FlowSpec | None = None

    def to_fields(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "approvers": frozenset(self.approvers),
            "tiers": {**DEFAULT_TIERS, **self.tiers},
            "tools": {
                name: ToolRule(
                    verdict=spec.decision,
                    approvers=frozenset(spec.approvers) if spec.approvers is not None else None,
                    constraints=tuple(
                        Constraint(argument=c.argument, op=c.op, value=c.value)
                        for c in spec.constraints
                    ),
                )
                for name, spec in self.tools.items()
            },
            "approval_ttl_s": self.approval_ttl_seconds,
            "on_injection": self.on_injection,
            "flow": self.flow.to_flow() if self.flow is not None else None,
        }
