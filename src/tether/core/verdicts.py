"""The three verdicts a policy gives a call, and which of two is the stricter."""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    """What the policy says of a call."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


SEVERITY = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.DENY: 2}


def stricter(a: Verdict, b: Verdict) -> Verdict:
    """Deny beats ask beats allow."""
    return a if SEVERITY[a] >= SEVERITY[b] else b
