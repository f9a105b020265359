"""The policy file's shape, checked by pydantic: imported only when a file is parsed.

``Policy.from_toml`` reads the TOML; this module says what may be in it (unknown keys are
errors, so a misspelt ``decison`` cannot silently mean "no rule") and builds the ``Policy``.
"""

from __future__ import annotations

from typing import Any

import pydantic

from tether.errors import ConfigurationError
from tether.policy import DEFAULT_TIERS, Constraint, ConstraintOp, Policy, ToolRule, Verdict
from tether.tools import Risk


def parse_policy_file(raw: dict[str, Any]) -> Policy:
    """The policy a parsed TOML document describes, or a ConfigurationError saying what in
    it is wrong."""
    try:
        spec = _PolicyFile.model_validate(raw)
    except pydantic.ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise ConfigurationError(f"policy file is invalid: {problems}") from e
    return spec.to_policy()


class _ConstraintSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    argument: str
    op: ConstraintOp
    value: Any


class _ToolSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    decision: Verdict | None = None
    approvers: list[str] | None = None
    constraints: list[_ConstraintSpec] = []


class _PolicyFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    version: str
    approvers: list[str] = []
    approval_ttl_seconds: float = pydantic.Field(default=3600.0, gt=0)
    on_injection: Verdict = Verdict.DENY
    tiers: dict[Risk, Verdict] = {}
    tools: dict[str, _ToolSpec] = {}

    def to_policy(self) -> Policy:
        policy = self._build()
        unanswerable = policy.asks_without_approvers()
        if unanswerable:
            raise ConfigurationError(
                f"policy {self.version} asks for approval ({', '.join(unanswerable)}) but names "
                "no approver for it, so those calls would wait forever; add approvers = [...] "
                "or make them allow or deny"
            )
        return policy

    def _build(self) -> Policy:
        return Policy(
            version=self.version,
            approvers=frozenset(self.approvers),
            tiers={**DEFAULT_TIERS, **self.tiers},
            tools={
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
            approval_ttl_s=self.approval_ttl_seconds,
            on_injection=self.on_injection,
        )
