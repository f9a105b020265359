"""A policy file: tiers, per-tool rules, argument constraints and who approves what.

`decide` is pure (no store, no clock), so this example only loads a policy and asks it
about a few calls; the gate asks exactly the same question before every real call.
Run it with `python examples/policy_file.py`.
"""

from typing import Any

from tether import Policy, Principal, Registry, Risk, decide
from tether.errors import ConfigurationError

POLICY = """
version = "payments-7"          # recorded with every decision and every approval
approvers = ["ops-lead"]        # who may approve when a tool names no one else
approval_ttl_seconds = 900      # an unanswered request expires after 15 minutes

[tiers]                         # the verdict for each risk tier (unnamed tiers keep defaults)
read = "allow"
write = "ask"

[tools.refund]                  # a rule for one tool beats its tier
decision = "ask"
approvers = ["finance-1", "finance-2"]
constraints = [
  { argument = "amount", op = "<=", value = 1000 },
  { argument = "currency", op = "in", value = ["EUR", "USD"] },
]
"""

registry = Registry()


# The manifest says which scope a tool needs and where its tenant sits in the arguments.
@registry.tool(risk=Risk.READ, required_scope="orders:read", tenant_path="tenant")
def read_order(tenant: str, order_id: str) -> dict[str, Any]:
    """Read an order."""
    return {}


@registry.tool(risk=Risk.WRITE, required_scope="payments:write", tenant_path="tenant")
def refund(tenant: str, order_id: str, amount: float, currency: str) -> dict[str, Any]:
    """Refund part of an order."""
    return {}


policy = Policy.from_toml(POLICY)  # or Policy.from_toml(Path("policy.toml"))
tools = {m.name: m for m in registry.manifests()}
clerk = Principal(
    subject="clerk-3", tenant="acme", scopes=frozenset({"orders:read", "payments:write"})
)
intern = Principal(subject="intern-9", tenant="acme", scopes=frozenset({"orders:read"}))
order = {"tenant": "acme", "order_id": "A-1"}

cases: list[tuple[str, Principal, str, dict[str, Any]]] = [
    ("a read", clerk, "read_order", order),
    ("a small refund", clerk, "refund", {**order, "amount": 40, "currency": "EUR"}),
    ("a large refund", clerk, "refund", {**order, "amount": 5000, "currency": "EUR"}),
    ("in pounds", clerk, "refund", {**order, "amount": 40, "currency": "GBP"}),
    (
        "another tenant",
        clerk,
        "refund",
        {**order, "tenant": "globex", "amount": 4, "currency": "EUR"},
    ),
    ("without the scope", intern, "refund", {**order, "amount": 40, "currency": "EUR"}),
]
for label, who, tool, arguments in cases:
    decision = decide(policy, who, tools[tool], arguments)
    print(f"{label:<18} {tool:<10} -> {decision.verdict.value:<5} ({'; '.join(decision.reasons)})")

print(f"refunds are approved by {', '.join(sorted(policy.approvers_for('refund')))}")
print(f"everything else by {', '.join(sorted(policy.approvers_for('read_order')))}")

# A policy that asks with nobody named to answer would leave calls waiting forever, so
# loading it fails and says why.
try:
    Policy.from_toml('version = "broken-1"\n[tiers]\nwrite = "ask"\n')
except ConfigurationError as e:
    print(f"refused: {e}")
