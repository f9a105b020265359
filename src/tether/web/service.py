"""What the inbox's pages and API both do, with the same rules: who may see an approval,
what a page shows about it, and deciding it through ``tether.gate.desk`` (the functions the
command line uses; the rules themselves live in ``tether.core.approvals.check_decider``).

An approval of a tenant the signed-in approver does not serve is not found, whatever its id:
a 403 would confirm it exists. Every refusal becomes a ``WebError`` with a stable code.

The module is long because it is the one place both faces read the store through: seeing,
the details a page shows (reasons, manifest, conversation), and deciding.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.core.approvals import Approval, ApprovalStatus
from tether.core.principal import Identity
from tether.errors import (
    ApprovalStateError,
    ApproverNotAuthorized,
    ConfigurationError,
    CredentialRefused,
    InvalidArguments,
    PolicyDenied,
    StoreError,
    TetherError,
)
from tether.gate.desk import decide_approval, edit_approval
from tether.web import triage

if TYPE_CHECKING:
    from tether.runs.app import App
    from tether.store import Store
    from tether.tools.registry import Manifest


class WebError(TetherError):
    """A refusal as the API answers it: an HTTP status, a stable code, one sentence. Part of
    the one error tree, so a caller of ``Inbox`` can catch ``TetherError`` alone."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def not_found(approval_id: str) -> WebError:
    return WebError(404, "not_found", f"no approval {approval_id} that you may see")


_TIER = re.compile(r"^tier (\w+):")
# What an approval or run id may look like in a URL (the API's path pattern too): anything
# else is not found, and the refusal does not repeat it.
ID_PATTERN = r"^[A-Za-z0-9_.~\-]{1,200}$"
_ID = re.compile(ID_PATTERN)


def checked_run_id(value: str) -> str:
    """A run id as a URL carries it: any printable text (spaces, ``/``, ``:`` included, as
    run ids are chosen by the caller), at most 200 characters."""
    if not 1 <= len(value) <= 200 or not value.isprintable():
        raise WebError(404, "not_found", "no such run that you may see")
    return value


def checked_id(value: str, what: str = "approval") -> str:
    if not _ID.fullmatch(value):
        raise WebError(404, "not_found", f"no such {what} that you may see")
    return value


@dataclass
class Inbox:
    """The store, seen by one approver at a time."""

    store: Store
    app_ref: str | None = None  # the app to load for edits (--app): the only one imported
    clock: Callable[[], float] = time.time
    verify_max_age_s: float = 60.0
    # Told of every decision made through this inbox (Slack replaces its messages).
    listeners: list[Callable[[Approval], None]] = field(default_factory=list)
    _apps: dict[str, App] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # An approval's reasons never change once recorded: read from the log once.
    _reasons: dict[str, list[str]] = field(default_factory=dict)
    # The last verdict, with the audit heads it was reached at and when.
    _verdict: tuple[Any, float, dict[str, Any]] | None = None

    # -- seeing --------------------------------------------------------------------------------
    def visible(
        self, who: Identity, status: ApprovalStatus | None = None, run_id: str | None = None
    ) -> list[Approval]:
        """The approvals ``who`` may see, newest first: of their tenants, and naming them
        among the approvers (the policy did not ask anyone else). ``status`` is the status
        as it reads now: a pending approval past its expiry is expired, not pending."""
        now = self.clock()
        stored = None if status is ApprovalStatus.EXPIRED else status
        rows = self.store.list_approvals(stored, run_id=run_id)
        if status is ApprovalStatus.EXPIRED:
            rows = [a for a in rows if status_now(a, now) is ApprovalStatus.EXPIRED]
        elif status is ApprovalStatus.PENDING:
            rows = [a for a in rows if now <= a.expires_at]
        return [a for a in reversed(rows) if may_see(a, who)]

    def decidable(self, who: Identity) -> list[Approval]:
        """What the inbox lists: pending approvals ``who`` may decide (their tenants, their
        tools, not their own requests, not expired), newest first."""
        return [a for a in self.visible(who, ApprovalStatus.PENDING) if may_decide(a, who)]

    def row(self, who: Identity, approval: Approval) -> dict[str, Any]:
        """One approval as the inbox lists it (``details`` and what triage needs)."""
        data = self.details(who, approval)
        reasons = data["reasons"]
        return {
            **data,
            "why": triage.one_line(reasons[0] if reasons else "the policy asks for this tool"),
            "summary": triage.summary(data["arguments"]),
            "time_left": triage.time_left(approval.expires_at, self.clock()),
        }

    def get(self, who: Identity, approval_id: str) -> Approval:
        checked_id(approval_id)
        with self.store.read() as tx:
            found = tx.get_approval(approval_id)
        if found is None or not may_see(found, who):
            raise not_found(approval_id)
        return found

    def details(self, who: Identity, approval: Approval) -> dict[str, Any]:
        """Everything a page or the API shows about one approval (arguments masked)."""
        data = approval.public_dict()
        reasons = self.reasons(approval)
        manifest = self.manifest(approval)
        risk = next((m.group(1) for r in reasons if (m := _TIER.match(r))), None)
        if risk is None and manifest is not None:
            risk = manifest.risk.value
        now = self.clock()
        status = status_now(approval, now)
        tool: dict[str, Any] | None = None
        if manifest is not None:
            tool = {
                "description": manifest.description,
                "risk": manifest.risk.value,
                "scope": manifest.required_scope,
                "cost": manifest.cost,
                "compensation": manifest.compensation,
            }
        return {
            **data,
            "status": status.value,
            "reasons": reasons,
            "risk": risk,
            "requester": approval.actor,
            "seconds_left": max(0.0, approval.expires_at - now),
            "expired": status is ApprovalStatus.EXPIRED,
            "can_decide": may_decide(approval, who) and now <= approval.expires_at,
            "tool_info": tool,
        }

    def conversation(self, run_id: str, limit: int = 8) -> list[dict[str, str]]:
        """The turns that led to the call: the user's requests and the model's words, newest
        last. A tool's answer is named, never shown: it may hold anything."""
        import json

        with self.store.read() as tx:
            raw = tx.messages(run_id)
        turns = []
        for blob in raw:
            try:
                m = json.loads(blob)
            except ValueError:
                continue
            role = str(m.get("role", "?"))
            if role == "tool":
                text = f"(the answer to call {m.get('tool_call_id') or '?'}: not shown, untrusted)"
            else:
                text = str(m.get("content") or "")
                calls = [str(c.get("name", "?")) for c in m.get("tool_calls") or []]
                if calls:
                    text = (text + " " if text else "") + f"(proposes {', '.join(calls)})"
            if len(text) > 2000:
                text = text[:1999] + "\u2026"
            turns.append({"role": role, "text": text})
        users = [t for t in turns if t["role"] == "user"][:1]  # the request that began it
        recent = turns[-limit:]
        return users + [t for t in recent if t not in users]

    def reasons(self, approval: Approval) -> list[str]:
        """Why the policy asked, as recorded when the request (or the edit) was made: read
        from the run's log once, then remembered (the entry is written with the approval and
        never changes, so a listing does not read every row's log again)."""
        with self._lock:
            known = self._reasons.get(approval.approval_id)
        if known is not None:
            return known
        found = self._read_reasons(approval)
        if found is not None:
            with self._lock:
                if len(self._reasons) >= 10_000:
                    self._reasons.clear()
                self._reasons[approval.approval_id] = found
        return found or []

    def _read_reasons(self, approval: Approval) -> list[str] | None:
        for entry in reversed(self.store.audit_tail(run_id=approval.run_id, limit=2000)):
            data = entry.record.get("data", {})
            if entry.kind == "approval_requested" and data.get("approval_id") == (
                approval.approval_id
            ):
                return [str(r) for r in data.get("reasons", [])]
            if entry.kind == "approval_edited" and data.get("replaced_by") == (
                approval.approval_id
            ):
                return [str(r) for r in data.get("decision", {}).get("reasons", [])]
        return None  # not found (yet): not remembered

    def steps(self, run_id: str, limit: int = 12) -> list[dict[str, Any]]:
        with self.store.read() as tx:
            steps = tx.steps(run_id)
        return [s.to_dict() for s in steps[-limit:]]

    def trail(self, who: Identity, run_id: str) -> list[dict[str, Any]]:
        """A run's audit entries, oldest first; 404 unless ``who`` serves its tenant."""
        checked_run_id(run_id)
        with self.store.read() as tx:
            run = tx.get_run(run_id)
        if run is None or not who.allows_tenant(run.tenant_id):
            raise WebError(404, "not_found", "no such run that you may see")
        return [
            {
                "seq": e.seq,
                "kind": e.kind,
                "at": e.record.get("at"),
                "actor": e.record.get("actor"),
                "data": e.record.get("data", {}),
            }
            for e in self.store.audit_tail(run_id=run_id, limit=500)
        ]

    def verify(self) -> dict[str, Any]:
        """``tether audit verify``'s verdict on the whole log. A full verification reads the
        whole log and state, so the verdict is kept while the audit heads stay as they were
        (nothing was appended) and for at most ``verify_max_age_s`` (the check also compares
        the state with the log, and a row changed behind tether's back moves no head)."""
        try:
            heads = self.store.audit_heads()
        except TetherError as e:
            return {"intact": None, "entries": 0, "problem": str(e)}
        key = tuple(sorted((chain, h.seq, h.hash) for chain, h in heads.items()))
        now = self.clock()
        with self._lock:
            cached = self._verdict
        if cached is not None and cached[0] == key and now - cached[1] < self.verify_max_age_s:
            return cached[2]
        try:
            report = self.store.verify_audit()
        except TetherError as e:
            verdict: dict[str, Any] = {"intact": None, "entries": 0, "problem": str(e)}
        else:
            verdict = {
                "intact": report.intact,
                "entries": report.entries,
                "problem": report.problem,
            }
        with self._lock:
            self._verdict = (key, now, verdict)
        return verdict

    # -- the app, for the edit form's schema and the edit's judgement -------------------------
    def app_for(self, run_id: str) -> App:
        """The app whose tools the run uses: only ever the one named with ``--app``. The app a
        run recorded is a row anyone who can write the database can change, so importing it
        would let them run code in the server; it is compared, never imported."""
        import json

        from tether.runs.app import load_app

        ref = self.app_ref
        if not ref:
            raise ConfigurationError(
                f"tether serve was started without --app, so the tools of run {run_id} are "
                "unknown here; start it with --app module:attribute"
            )
        with self.store.read() as tx:
            record = tx.get_run(run_id)
        recorded = json.loads(record.checkpoint_json).get("app") if record is not None else None
        if recorded and recorded != ref:
            raise ConfigurationError(
                f"run {run_id} runs app {recorded}, not {ref}; decide it with the command line "
                "or a tether serve started with that --app"
            )
        with self._lock:
            if ref not in self._apps:
                try:
                    self._apps[ref] = load_app(ref)
                except TetherError:
                    raise
                except Exception as e:  # the app's own code failed as it was built
                    raise ConfigurationError(f"loading app {ref} failed: {e!r}") from e
            return self._apps[ref]

    def manifest(self, approval: Approval) -> Manifest | None:
        try:
            tool = self.app_for(approval.run_id).registry.resolve(
                approval.tool, approval.tool_version
            )
        except TetherError:
            return None
        return tool.manifest

    # -- deciding --------------------------------------------------------------------------------
    def decide(
        self, who: Identity, approval_id: str, *, approve: bool, reason: str | None
    ) -> Approval:
        approval = self.get(who, approval_id)
        with refusals(approval, self.clock):
            decided = decide_approval(
                self.store, approval_id, who, approve=approve, now=self.clock(), reason=reason
            )
        self.tell(decided)
        return decided

    def tell(self, approval: Approval) -> None:
        for listener in self.listeners:
            listener(approval)

    def edit(
        self,
        who: Identity,
        approval_id: str,
        arguments: Mapping[str, Any],
        reason: str | None,
    ) -> Approval:
        """An edit is a new proposal: the tool's schema and the policy judge it again."""
        approval = self.get(who, approval_id)
        with refusals(approval, self.clock):
            app = self.app_for(approval.run_id)
            new = edit_approval(
                self.store,
                app.registry,
                app.policy,
                approval_id,
                who,
                dict(arguments),
                now=self.clock(),
                reason=reason,
            )
        with self.store.read() as tx:
            replaced = tx.get_approval(approval_id)
        self.tell(replaced or approval)
        return new


def status_now(approval: Approval, now: float) -> ApprovalStatus:
    """The status as it reads at ``now``: a pending approval past its expiry is expired
    (the store records that when someone next tries to decide it)."""
    if approval.status is ApprovalStatus.PENDING and now > approval.expires_at:
        return ApprovalStatus.EXPIRED
    return approval.status


def may_see(approval: Approval, who: Identity) -> bool:
    """An approval is shown to the approvers the policy named for it, in its tenant; to
    anyone else it does not exist."""
    return who.allows_tenant(approval.tenant) and (
        who.via == "code" or who.name in approval.approvers
    )


def may_decide(approval: Approval, who: Identity) -> bool:
    """Whether ``who`` could decide ``approval`` by the rules in force when it was requested
    (the decision itself checks again, in its transaction)."""
    return (
        approval.status is ApprovalStatus.PENDING
        and who.allows_tenant(approval.tenant)
        and who.name in approval.approvers
        and who.name != approval.actor
    )


@contextmanager
def refusals(approval: Approval, clock: Callable[[], float]) -> Iterator[None]:
    """Turns what deciding raises into ``WebError``s with stable codes."""
    try:
        yield
    except WebError:
        raise
    except TetherError as e:
        raise web_error(e, approval, clock()) from e


def web_error(e: TetherError, approval: Approval, now: float) -> WebError:
    message = str(e)
    if isinstance(e, InvalidArguments):
        return WebError(422, "invalid_arguments", message)
    if isinstance(e, PolicyDenied):
        return WebError(403, "policy_denied", message)
    if isinstance(e, ApproverNotAuthorized):
        return WebError(403, "not_authorized", message)
    if isinstance(e, CredentialRefused):
        return WebError(401, "credential_refused", message)
    if isinstance(e, ApprovalStateError):
        if approval.status is not ApprovalStatus.PENDING:
            return WebError(409, "not_pending", message)
        if now > approval.expires_at:
            return WebError(409, "expired", message)
        return WebError(409, "conflict", message)
    if isinstance(e, ConfigurationError):
        return WebError(409, "edit_unavailable", message)
    if isinstance(e, StoreError):
        return WebError(503, "store_unavailable", message)
    return WebError(400, "refused", message)
