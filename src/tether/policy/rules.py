"""Who may call what: principals, the versioned policy, and the pure decision.

``decide`` does no I/O and has no clock: the same call, principal, manifest and policy always
give the same decision, with every reason that led to it. Deny beats ask beats allow, and
irreversible tools always ask, whatever a policy file says — a typo in a file must not be able
to make "delete everything" run unattended.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.principal import Principal
from tether.core.verdicts import SEVERITY, Verdict
from tether.errors import ConfigurationError
from tether.policy.constraints import DEFAULT_TIERS, ToolRule
from tether.tools.registry import Manifest, Risk
from tether.tools.tenancy import is_missing, tenant_at, tenant_like_values

if TYPE_CHECKING:
    from tether.policy.flow import FlowPolicy
    from tether.policy.provenance import ArgumentProvenance, ProvenanceIndex

__all__ = ["Decision", "Policy", "decide"]


_SEVERITY = SEVERITY


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What may run: a verdict per risk tier, per-tool rules (verdict, argument constraints,
    approvers), who may approve, and how long a request waits. Versioned: a grant is bound
    to the version it was decided under. ``Policy.from_toml`` loads a policy file."""

    version: str
    approvers: frozenset[str] = frozenset()
    tiers: Mapping[Risk, Verdict] = field(default_factory=lambda: dict(DEFAULT_TIERS))
    tools: Mapping[str, ToolRule] = field(default_factory=dict)
    approval_ttl_s: float = 3600.0
    on_injection: Verdict = Verdict.DENY
    # Rules over where argument values came from (tether.policy.flow); None: tiers alone.
    flow: FlowPolicy | None = None

    def approvers_for(self, tool: str) -> frozenset[str]:
        rule = self.tools.get(tool)
        if rule is not None and rule.approvers is not None:
            return rule.approvers
        return self.approvers

    def asks_without_approvers(self, tools: Iterable[Manifest] | None = None) -> list[str]:
        """What this policy can ask about with no one named to answer it: the tiers and tool
        rules that ask or, given the registry's manifests, the tools it would ask about."""
        if tools is None:
            found = [
                f"tier {risk.value}"
                for risk, verdict in sorted(self.tiers.items())
                if verdict is Verdict.ASK and risk is not Risk.IRREVERSIBLE and not self.approvers
            ]
            found += [
                f"tool {name}"
                for name, rule in sorted(self.tools.items())
                if rule.verdict is Verdict.ASK and not self.approvers_for(name)
            ]
            if self.flow is not None and not self.approvers:
                found += [f"flow rule for tier {r.value}" for r in sorted(self.flow.tiers)]
                found += [
                    f"flow rule for tool {n}"
                    for n in sorted(self.flow.tools)
                    if not self.approvers_for(n)
                ]
                found += ["a session rule"] * bool(self.flow.session)
                found += ["the Cedar flow policies"] * (self.flow.cedar is not None)
            return found
        return sorted(
            f"tool {m.name}" for m in tools if self._may_ask(m) and not self.approvers_for(m.name)
        )

    def check_against(self, tools: Iterable[Manifest]) -> None:
        """Refuse this policy for a gate over these tools: a rule naming what the registry
        does not have (``unknown_names``), or a call it would ask about with no one named to
        answer (``asks_without_approvers``)."""
        manifests = list(tools)
        unknown = self.unknown_names(manifests)
        if unknown:
            raise ConfigurationError(
                f"policy {self.version}: " + "; ".join(unknown) + ". Fix the name, "
                "or register the tool before building the gate"
            )
        unanswerable = self.asks_without_approvers(manifests)
        if unanswerable:
            raise ConfigurationError(
                f"policy {self.version} would ask for approval of "
                f"{', '.join(unanswerable)} but names no approver; add approvers or make "
                "those calls allow or deny"
            )

    def unknown_names(self, tools: Iterable[Manifest]) -> list[str]:
        """What this policy names that the registry does not have: tool tables, flow rules
        and tool lists for tools it lacks, constraints on arguments a tool's schema does not
        declare. Each is a rule that would silently never apply (a typo'd ``[tools.refnud]``
        loses the deny it meant), so ``Gate`` refuses them, naming the closest real name."""
        import difflib

        manifests = {m.name: m for m in tools}

        def hint(name: str, known: Iterable[str]) -> str:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            return f" (did you mean {close[0]!r}?)" if close else ""

        named: list[tuple[str, str]] = [(f"[tools.{n}]", n) for n in self.tools]
        if self.flow is not None:
            flow = self.flow
            named += [(f"[flow.tools.{n}]", n) for n in flow.tools]
            for key, names in (
                ("trusted_tools", flow.trusted_tools),
                ("untrusted_tools", flow.untrusted_tools),
                ("private_tools", flow.private_tools),
                ("readers_from", flow.readers_from),
            ):
                named += [(f"[flow] {key} {n!r}", n) for n in sorted(names)]
        found = [
            f"{where} names tool {name!r}, which the registry does not have" + hint(name, manifests)
            for where, name in named
            if name not in manifests
        ]
        for name, rule in sorted(self.tools.items()):
            manifest = manifests.get(name)
            if manifest is None:
                continue
            declared = manifest.parameters.get("properties")
            if not isinstance(declared, Mapping) or manifest.parameters.get(
                "additionalProperties", False
            ) not in (False, None):
                continue  # a schema open to any argument: nothing to check a name against
            for i, c in enumerate(rule.constraints):
                if c.argument not in declared:
                    found.append(
                        f"[tools.{name}] constraints.{i} is on argument {c.argument!r}, which "
                        f"tool {name} does not take" + hint(c.argument, declared)
                    )
        return found

    def can_ask(self, manifest: Manifest) -> bool:
        """Whether this policy could ask a human about some call of this tool: its rule or
        tier asks, it is irreversible, a flow rule covers it, or screening raises a flagged
        call to an ask (``on_injection``). False means no run's state and no arguments make
        it ask, so an entrance that asks before it calls need not read the store to know."""
        return self._may_ask(manifest) or self.on_injection is Verdict.ASK

    def _may_ask(self, manifest: Manifest) -> bool:
        rule = self.tools.get(manifest.name)
        verdict = rule.verdict if rule is not None and rule.verdict is not None else None
        verdict = verdict or self.tiers.get(manifest.risk, Verdict.DENY)
        irreversible = manifest.risk is Risk.IRREVERSIBLE and verdict is Verdict.ALLOW
        flow = self.flow is not None and self.flow.may_ask(manifest)
        return verdict is Verdict.ASK or irreversible or flow

    @classmethod
    def from_toml(cls, source: str | Path) -> Policy:
        """Load a policy file; ``source`` is a path (a ``Path``, or a string naming a
        ``.toml`` file) or the TOML text itself."""
        import tomllib

        if isinstance(source, str) and "\n" not in source and source.strip().endswith(".toml"):
            source = Path(source.strip())  # a file name, not a one-line document
        if isinstance(source, Path):
            try:
                text = source.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                why = e.strerror if isinstance(e, OSError) else "it is not UTF-8 text"
                raise ConfigurationError(f"cannot read policy file {source}: {why}") from None
        else:
            text = source
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigurationError(f"policy file is not valid TOML: {e}") from e
        return cls.from_dict(raw)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Policy:
        """The policy a parsed policy document (a TOML table) describes."""
        # pydantic is imported only here: checking a file's shape is its job, and nothing
        # else on the way to judging a call needs it.
        from tether.policy.file import parse_policy_file

        policy = cls(**parse_policy_file(dict(raw)))
        unanswerable = policy.asks_without_approvers()
        if unanswerable:
            raise ConfigurationError(
                f"policy {policy.version} asks for approval ({', '.join(unanswerable)}) but "
                "names no approver for it, so those calls would wait forever; add "
                "approvers = [...] or make them allow or deny"
            )
        return policy


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The policy's verdict on one call, every reason behind it, and the policy version."""

    verdict: Verdict
    reasons: tuple[str, ...]
    policy_version: str
    # Where each argument's value came from, when the policy has flow rules (not in
    # ``to_dict``: the reasons name what decided, and audit entries keep to them).
    provenance: tuple[ArgumentProvenance, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "policy_version": self.policy_version,
        }


def decide(
    policy: Policy | None,
    principal: Principal,
    manifest: Manifest | None,
    arguments: Mapping[str, Any],
    flags: tuple[str, ...] = (),
    provenance: ProvenanceIndex | None = None,
    *,
    argument_digest: str = "",
) -> Decision:
    """The policy's verdict on one proposed call, with every reason behind it.
    ``provenance``: what the run has seen, for the policy's flow rules; ``argument_digest``:
    the call's, for the intent rule's check that the same call is not made twice."""
    if policy is None:
        return Decision(verdict=Verdict.DENY, reasons=("no policy loaded",), policy_version="")
    version = policy.version
    if manifest is None:
        return Decision(verdict=Verdict.DENY, reasons=("unknown tool",), policy_version=version)

    denials = _denials(policy, principal, manifest, arguments)
    if denials:
        return Decision(verdict=Verdict.DENY, reasons=tuple(denials), policy_version=version)

    rule = policy.tools.get(manifest.name)
    if rule is not None and rule.verdict is not None:
        verdict, reasons = rule.verdict, [f"tool rule '{manifest.name}': {rule.verdict.value}"]
    else:
        verdict = policy.tiers.get(manifest.risk, Verdict.DENY)
        reasons = [f"tier {manifest.risk.value}: {verdict.value}"]
    labels: tuple[ArgumentProvenance, ...] = ()
    if policy.flow is not None and provenance is not None:
        explicit = rule is not None and rule.verdict is not None
        verdict, labels = policy.flow.judge(
            manifest,
            arguments,
            provenance,
            verdict,
            reasons,
            explicit=explicit,
            subject=principal.subject,
            argument_digest=argument_digest,
        )
        if verdict is Verdict.DENY:
            return Decision(
                verdict=verdict, reasons=tuple(reasons), policy_version=version, provenance=labels
            )
    if manifest.risk is Risk.IRREVERSIBLE and verdict is Verdict.ALLOW:
        verdict = Verdict.ASK
        reasons.append("irreversible tools always need approval")
    if flags:
        reasons.extend(f"screening: {f}" for f in flags)
        verdict = max(verdict, policy.on_injection, key=_SEVERITY.__getitem__)
    return Decision(
        verdict=verdict, reasons=tuple(reasons), policy_version=version, provenance=labels
    )


def _denials(
    policy: Policy, principal: Principal, manifest: Manifest, arguments: Mapping[str, Any]
) -> list[str]:
    denials: list[str] = []
    scope = manifest.required_scope
    if scope is not None and scope not in principal.scopes:
        denials.append(f"missing scope {scope}")
    denials.extend(_tenant_denials(principal, manifest, arguments))
    if manifest.allowed_tenants is not None and principal.tenant not in manifest.allowed_tenants:
        denials.append(f"tenant {principal.tenant!r} is not allowed to use this tool")
    rule = policy.tools.get(manifest.name)
    if rule is not None:
        for constraint in rule.constraints:
            problem = constraint.violation(arguments)
            if problem is not None:
                denials.append(problem)
    return denials


def _tenant_denials(
    principal: Principal, manifest: Manifest, arguments: Mapping[str, Any]
) -> list[str]:
    if manifest.tenant_scoped is False:
        return []  # declared not tenant-scoped: its tenant-looking arguments are its data
    path = manifest.tenant_parts
    found: list[str] = []
    if path is not None:
        value = tenant_at(arguments, path)
        if is_missing(value):
            # The gate fills a missing tenant from the principal, so only a caller that
            # skipped that step gets here; without a tenant the call cannot be bound to one.
            return [f"argument {manifest.tenant_path} (the tenant) is missing"]
        if value != principal.tenant:
            found.append(
                f"argument {manifest.tenant_path} {value!r} is not the principal's "
                f"tenant {principal.tenant!r}"
            )
    for where, value in tenant_like_values(arguments, path):
        named = value if isinstance(value, list) else [value]
        if any(v != principal.tenant for v in named if not is_missing(v)):
            found.append(
                f"argument {where} {value!r} names a tenant other than the principal's "
                f"{principal.tenant!r}"
            )
    return found
