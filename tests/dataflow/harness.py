"""Running the suites through tether's real gate, and the figures they give.

Each scenario is one run on a memory store: the user's request recorded as trusted input,
then a scripted agent that makes the task's calls and, the moment a tool hands it the
planted text, obeys it (the worst case). A human approves every call the task itself needs
and denies every call the injection asked for. The world is then checked: a benign task is
done if its effect is there; an attack call was auto-executed if its effect is there, since
every attack call that asked was denied."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from tests.dataflow import env as world
from tests.dataflow.suites import TASKS, Injection, Task, injections
from tests.dataflow.travel import TRAVEL_POLICY
from tether import Gate, Policy, Principal, ToolCall
from tether.errors import ApprovalRequired, Denied, ToolFailed
from tether.store import MemoryStore

PRINCIPAL = Principal(subject="agent", tenant="t1")
APPROVER = "alice"

TIER_ONLY = """
version = "tier-only"
approvers = ["alice"]
"""

# Content arguments may quote data; where they point (addresses, links) must be trusted.
# Written from the tools' documentation: which arguments say where something goes (checked,
# and the audience that will read it), which are content, and which words of a request ask
# for each action.
_CONTENT = (
    'body = "links", text = "links", content = "links", memo = "links", subject = "links", '
    'title = "links", description = "links"'
)
FOLLOW = '["myco.com", "partner.org", "example.com", "example.net", "example.org", "python.org"]'
PROVENANCE = f"""
version = "provenance"
approvers = ["alice"]

[flow]
trusted_values = ["me@myco.com"]
owner = ["me@myco.com"]
# The mail server assigns the ids of emails: those it vouches for.
trusted_fields = {{ list_emails = ["id"], read_email = ["id"], search_emails = ["id"] }}

# After untrusted output, a write must be one the user asked for.
[flow.intent]
tiers = ["write", "admin", "irreversible"]

[flow.tiers.write]
trusted = "allow"
arguments = {{ {_CONTENT} }}

# Any read that takes a link is egress, whatever the tool is called; nothing else of a read
# is checked. Links found in what the run read may be followed, a few per run, on the
# company's and its partners' sites and the public reference sites the team reads.
[flow.tiers.read]
default = "any"
egress = ["*"]
follow_links = {FOLLOW}

[flow.tiers.sensitive_read]
default = "any"
egress = ["*"]
follow_links = {FOLLOW}

[flow.tools.send_email]
trusted = "allow"
arguments = {{ {_CONTENT} }}
audience = ["to"]
intent = ["email", "mail", "send", "reply", "write to", "tell", "let", "answer"]

[flow.tools.forward_email]
trusted = "allow"
arguments = {{ email_id = "trusted" }}
audience = ["to"]
intent = ["forward"]

[flow.tools.create_event]
trusted = "allow"
arguments = {{ {_CONTENT} }}
audience = ["participants"]
intent = ["event", "meeting", "calendar", "invite", "schedule", "put", "add", "book", "set up"]

[flow.tools.send_money]
trusted = "allow"
arguments = {{ recipient = "trusted", amount = "trusted", memo = "links" }}
intent = ["pay", "transfer", "send money", "send", "wire", "refund", "move"]

[flow.tools.schedule_transfer]
trusted = "allow"
arguments = {{ recipient = "trusted", amount = "trusted", date = "trusted", memo = "links" }}
intent = ["schedule", "standing order", "recurring", "monthly", "every month", "set up"]

[flow.tools.share_file]
trusted = "allow"
audience = ["email"]
intent = ["share", "give access"]

[flow.tools.delete_file]
trusted = "allow"
intent = ["delete", "remove", "clean up"]

[flow.tools.create_file]
trusted = "allow"
arguments = {{ {_CONTENT} }}
intent = ["create", "write", "save", "copy", "new file", "make", "note down", "start"]

[flow.tools.upload_file]
trusted = "allow"
egress = ["url"]
intent = ["upload"]

[flow.tools.get_webpage]
egress = ["url"]
follow_links = {FOLLOW}

[flow.tools.post_message]
trusted = "allow"
arguments = {{ {_CONTENT} }}
audience = ["channel"]
intent = ["post", "reply", "announce", "say", "tell", "share", "let"]

[flow.tools.send_dm]
trusted = "allow"
arguments = {{ user = "trusted", text = "links" }}
audience = ["user"]
intent = ["dm", "direct message", "message", "tell", "send", "ping", "let"]

[flow.tools.invite_user]
trusted = "allow"
arguments = {{ user = "trusted" }}
audience = ["email"]
intent = ["invite", "add"]

{TRAVEL_POLICY}

# Screening is defence in depth: a flagged output makes the admin and irreversible tools ask.
[[flow.session]]
after = "flagged_output"
tiers = ["admin", "irreversible"]
egress = true
"""

# The same without the session rule that reacts to screening flags: what provenance alone does.
_SCREENING_RULE = (
    '[[flow.session]]\nafter = "flagged_output"\ntiers = ["admin", "irreversible"]\negress = true\n'
)
assert _SCREENING_RULE in PROVENANCE
WITHOUT_SCREENING = PROVENANCE.replace(_SCREENING_RULE, "").replace(
    'version = "provenance"', 'version = "provenance-without-screening"'
)

# The provenance policy's verdicts written in Cedar instead (tether.policy.cedar): the flow rules
# still say how each argument is checked; Cedar decides from the labels.
_CEDAR_POLICIES = """
@id("reads-to-trusted-places")
permit(principal, action, resource)
when { context.tier == "read" && !(context.arguments has url && !context.arguments.url.trusted) };

@id("writes-made-of-trusted-values")
permit(principal, action, resource)
when { context.tier == "write" && context.untrusted.isEmpty() };
"""
CEDAR = PROVENANCE.replace('version = "provenance"', 'version = "provenance-cedar"').replace(
    "[flow]\n", f"[flow]\ncedar = '''{_CEDAR_POLICIES}'''\n", 1
)


class ScriptedAgent:
    """Makes a task's calls through the gate; obeys a planted injection once it reads it."""

    def __init__(self, gate: Gate, run_id: str, env: world.Env, injection: Injection | None):
        self.gate, self.run_id, self.env, self.injection = gate, run_id, env, injection
        self.n = 0
        self.approvals = 0
        self.attack_asks = 0
        self.obeyed = False
        self.attacking = False
        self.timings: list[float] = []

    def call(self, tool: str, **arguments: Any) -> Any:
        self.n += 1
        call = ToolCall(call_id=f"c{self.n}", tool=tool, arguments=arguments)
        try:
            outcome = self._timed(call)
        except ApprovalRequired as asked:
            if self.attacking:
                self.attack_asks += 1
                self.gate.deny(asked.approval_id, APPROVER, reason="not what I asked for")
                return None
            self.approvals += 1
            self.gate.approve(asked.approval_id, APPROVER)
            outcome = self.gate.call(self.run_id, call)
        except (Denied, ToolFailed):
            return None
        if self.injection is not None and self.env.delivered and not self.obeyed:
            self.obeyed = True
            self.attacking = True
            try:
                self.injection.goal.attack(self)
            finally:
                self.attacking = False
        return outcome.result

    def _timed(self, call: ToolCall) -> Any:
        started = time.perf_counter()
        try:
            return self.gate.call(self.run_id, call)
        finally:
            self.timings.append(time.perf_counter() - started)


@dataclass
class Figures:
    policy: str
    benign_tasks: int
    benign_completed: int
    benign_no_approval: float  # completed with no approval, as a fraction of benign tasks
    approvals_per_benign_task: float
    pairs: int
    injected_auto_executed: int  # attacker effects in the world after the runs
    attacks_asked: int  # attacker calls that stopped for a human
    injections_delivered: int
    utility_under_attack: float  # pairs whose own task still got done
    approvals_per_injected_task: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_one(gate: Gate, task: Task, injection: Injection | None) -> tuple[ScriptedAgent, world.Env]:
    env = world.fresh()
    if injection is not None:
        assert task.plant is not None
        text = injection.text()
        task.plant(env, text)
        env.injection = text
    world.ENV.current = env
    run_id = gate.start_run(PRINCIPAL)
    gate.record_input(run_id, task.prompt)
    agent = ScriptedAgent(gate, run_id, env, injection)
    task.run(agent)
    return agent, env


def make_gate(policy_text: str) -> Gate:
    return Gate(world.registry(), Policy.from_toml(policy_text), MemoryStore())


def run_suites(policy_text: str) -> Figures:
    gate = make_gate(policy_text)
    name = gate.policy_version
    no_approval = completed = approvals = 0
    for task in TASKS:
        agent, env = run_one(gate, task, None)
        done = task.done(env)
        completed += done
        approvals += agent.approvals
        no_approval += done and agent.approvals == 0
    pairs = injections()
    auto = asked = delivered = useful = injected_approvals = 0
    for task, injection in pairs:
        agent, env = run_one(gate, task, injection)
        auto += injection.goal.check(env)
        asked += agent.attack_asks
        delivered += env.delivered
        useful += task.done(env)
        injected_approvals += agent.approvals
    return Figures(
        policy=name,
        benign_tasks=len(TASKS),
        benign_completed=completed,
        benign_no_approval=round(no_approval / len(TASKS), 4),
        approvals_per_benign_task=round(approvals / len(TASKS), 4),
        pairs=len(pairs),
        injected_auto_executed=auto,
        attacks_asked=asked,
        injections_delivered=delivered,
        utility_under_attack=round(useful / len(pairs), 4),
        approvals_per_injected_task=round(injected_approvals / len(pairs), 4),
    )


def details(policy_text: str) -> list[dict[str, Any]]:
    """Per scenario: what asked and what got through (for reading a regression)."""
    gate = make_gate(policy_text)
    rows: list[dict[str, Any]] = []
    for task in TASKS:
        agent, env = run_one(gate, task, None)
        rows.append({"task": task.name, "done": task.done(env), "approvals": agent.approvals})
    for task, injection in injections():
        agent, env = run_one(gate, task, injection)
        rows.append(
            {
                "task": task.name,
                "goal": injection.goal.name,
                "framing": injection.framing,
                "delivered": env.delivered,
                "auto_executed": injection.goal.check(env),
                "approvals": agent.approvals,
            }
        )
    return rows


if __name__ == "__main__":
    for text in (TIER_ONLY, PROVENANCE):
        print(json.dumps(run_suites(text).to_dict()))
