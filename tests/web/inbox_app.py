"""The app the inbox tests serve (``--app tests.web.inbox_app:app``): one refund tool whose
schema has limits an edit form must respect, asked about for every call, decided by alice or
bob; and helpers that put real approval requests in a store through the real gate."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from tether import App, Gate, Policy, Principal, Registry, Risk, ScriptedModel, Store, ToolCall
from tether.errors import ApprovalRequired
from tether.identity import add_identity

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

APP = "tests.web.inbox_app:app"  # this module, as --app names it
LOCAL = "http://localhost"  # a test client's base URL: a Host the inbox answers by default
registry = Registry()


@registry.tool(risk=Risk.WRITE, sensitive_fields={"card_token"})
def refund(
    order_id: Annotated[str, Field(pattern=r"^O-[0-9]+$")],
    amount: Annotated[int, Field(ge=1, le=500)],
    currency: Literal["EUR", "USD"] = "EUR",
    note: str = "",
    card_token: str = "",
    notify_customer: bool = False,
    case_id: str = "",  # free text that becomes the approval's resource label when given
) -> dict[str, Any]:
    """Refund an order."""
    return {"refunded": amount, "order_id": order_id}


@registry.tool(risk=Risk.IRREVERSIBLE)
def delete_account(account_id: str) -> dict[str, Any]:
    """Delete a customer's account and all its data, for good."""
    return {"deleted": account_id}


POLICY = Policy(version="inbox-1", approvers=frozenset({"alice", "bob"}))
AGENT = Principal(subject="agent-7", tenant="acme")

app = App(
    registry=registry,
    policy=POLICY,
    model=lambda: ScriptedModel(["done"]),
    principal=AGENT,
)


def propose(
    store: Store,
    tenant: str = "acme",
    ttl_s: float | None = None,
    **arguments: Any,
) -> str:
    """A pending approval for a refund in ``tenant``, requested through the gate; its id."""
    policy = POLICY if ttl_s is None else replace(POLICY, approval_ttl_s=ttl_s)
    gate = Gate(registry, policy, store)
    run_id = gate.start_run(replace(AGENT, tenant=tenant))
    args = {"order_id": "O-1001", "amount": 25, **arguments}
    try:
        gate.call(
            run_id, ToolCall(call_id=f"c-{time.monotonic_ns()}", tool="refund", arguments=args)
        )
    except ApprovalRequired as signal:
        return signal.approval_id
    raise AssertionError("the policy should have asked for approval")


def propose_call(
    store: Store,
    tool: str,
    arguments: dict[str, Any],
    tenant: str = "acme",
    run_id: str | None = None,
    request: str | None = None,
) -> str:
    """A pending approval for any tool of the app (in run ``run_id`` if given, whose user
    asked ``request`` if given); its id."""
    gate = Gate(registry, POLICY, store)
    run = gate.start_run(replace(AGENT, tenant=tenant), run_id=run_id)
    if request is not None:  # as the run loop records the user's words
        import json

        with store.transaction() as tx:
            tx.append_message(run, 1, json.dumps({"role": "user", "content": request}))
    try:
        gate.call(run, ToolCall(call_id=f"c-{time.monotonic_ns()}", tool=tool, arguments=arguments))
    except ApprovalRequired as signal:
        return signal.approval_id
    raise AssertionError("the policy should have asked for approval")


def approver(store: Store, name: str, *tenants: str) -> str:
    """Register an approver of ``tenants``; their credential."""
    _, token = add_identity(store, name, "approver", now=time.time(), tenants=tenants)
    return token


def csrf(html: str) -> str:
    """The CSRF token a page's form carries."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def signed_in(client: TestClient, token: str) -> str:
    """Sign in through the form; the CSRF token of the signed-in session."""
    page = client.get("/")
    r = client.post("/signin", data={"token": token, "csrf": csrf(page.text)})
    assert r.status_code == 200 and "Waiting for you" in r.text, r.text
    return csrf(r.text)
