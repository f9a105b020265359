"""A run that waits for a human: it pauses, an approver's credential decides, and a fresh
Runner (as another process would) finishes it, with exactly one effect.

Run it with `python examples/waiting_for_approval.py`; everything lives in a temporary
directory. From the shell the same steps are `tether approvers add`, `tether approvals
approve ID` (with $TETHER_APPROVER_TOKEN) and `tether runs resume RUN`.
"""

import tempfile
import time
from pathlib import Path
from typing import Any

from tether import App, ModelToolCall, Policy, Principal, Registry, Risk, ScriptedModel, open_store
from tether.errors import TetherError
from tether.identity import add_identity, authenticate, require_token

workdir = tempfile.TemporaryDirectory()  # removed at the end
tmp = Path(workdir.name)
db = f"sqlite:///{tmp / 'tether.db'}"
witness = tmp / "refunds.log"  # the outside system: one line per refund really made


def build() -> App:
    """What `--app module:build` would load: tools, policy, model and principal."""
    registry = Registry()

    @registry.tool(risk=Risk.WRITE, required_scope="payments:write", tenant_path="tenant")
    def refund(tenant: str, order_id: str, amount: int, operation_key: str) -> dict[str, Any]:
        """Refund an order."""
        with witness.open("a") as f:
            f.write(f"{operation_key}\n")
        return {"order_id": order_id, "refunded": amount}

    call = ModelToolCall(id="call-1", name="refund", arguments={"order_id": "A-7", "amount": 30})
    return App(
        registry=registry,
        # A write asks by default; finance-1 is who may answer.
        policy=Policy(version="payments-1", approvers=frozenset({"finance-1"})),
        model=lambda: ScriptedModel([[call], "Refunded A-7."]),
        principal=Principal(subject="agent-7", tenant="acme", scopes=frozenset({"payments:write"})),
    )


# 1. The run proposes the refund and stops: nothing has run, the approval is stored.
app, store = build(), open_store(db)
first = app.runner(store).start("refund order A-7", app.principal)
store.close()  # the process could exit here; everything the run needs is in the store
(approval_id,) = first.approvals
print(f"run {first.run_id}: {first.status}, waiting for {approval_id}")

# 2. Once, an operator registers the approver; the credential is shown this once (only its
#    hash is stored) and handed over, here as a file only its owner can read.
store = open_store(db)
_, token = add_identity(store, "finance-1", "approver", now=time.time(), tenants=["acme"])
token_file = tmp / "finance-1.token"
token_file.write_text(token)
token_file.chmod(0o600)

# 3. Later, the approver presents the credential: who decides is what it proves, never a
#    name typed in. A credential for another tenant is refused.
_, stranger = add_identity(store, "finance-9", "approver", now=time.time(), tenants=["globex"])
try:
    app.gate(store).approve(approval_id, authenticate(store, stranger, "approver"))
except TetherError as e:
    print(f"refused: {e}")
who = authenticate(store, require_token("approver", str(token_file), "approving"), "approver")
decided = app.gate(store).approve(approval_id, who)
print(f"{approval_id}: {decided.status.value} by {decided.approver} ({who.credential_id})")
store.close()

# 4. A fresh app, store and Runner resume the run: the stored model turn is not asked
#    again, the grant is used once, the refund runs once.
app, store = build(), open_store(db)
done = app.runner(store).resume(first.run_id)
for step in done.steps:
    print(f"  [{step.index}] {step.kind:<17} {step.detail[:60]}")
refunds = witness.read_text().splitlines()
print(f"run {done.run_id}: {done.status}; refund ran {len(refunds)} time: {len(refunds)} effect")
print(store.verify_audit().summary())  # every step above is in the authenticated log
store.close()
workdir.cleanup()
