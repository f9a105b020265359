"""A notification's link to its approval, sealed: ``/approvals/ID?link=UNTIL.SEAL``, where the
seal is an HMAC under the key kept outside the database (``AuditKeys.seal``) over the
approval's id and the link's end (the approval's expiry). The inbox tells a link tether made
from one someone crafted, and says so on the sign-in page; the link opens nothing by itself
(the approver still signs in), so a leaked one gives away only what the notification said.
"""

from __future__ import annotations

from tether.errors import AuditKeyMissing
from tether.evidence.keys import AuditKeys

LINK_PURPOSE = "notification-link"


def approval_link(base_url: str | None, approval_id: str, seal: str | None = None) -> str | None:
    if not base_url:
        return None
    link = f"{base_url.rstrip('/')}/approvals/{approval_id}"
    return f"{link}?link={seal}" if seal else link


def link_seal(keys: AuditKeys | None, approval_id: str, until: float) -> str | None:
    """What a notification's link carries to prove tether made it for this approval, good
    until ``until`` (the approval's expiry): ``UNTIL.KEYID:MAC`` under the key outside the
    database, or None without one."""
    if keys is None:
        return None
    try:
        seal = keys.seal(LINK_PURPOSE, {"approval_id": approval_id, "until": int(until)})
    except AuditKeyMissing:
        return None
    return f"{int(until)}.{seal}"


def link_is_sound(keys: AuditKeys, approval_id: str, value: str | None, now: float) -> bool:
    """Whether ``value`` is a seal ``link_seal`` made for this approval, still in time."""
    until, _, seal = (value or "").partition(".")
    if not until.isdigit() or len(until) > 12 or now > int(until):
        return False
    try:
        return keys.verify_seal(
            LINK_PURPOSE, {"approval_id": approval_id, "until": int(until)}, seal
        )
    except AuditKeyMissing:
        return False
