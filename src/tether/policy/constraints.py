"""Per-tool rules: a tool's own verdict and approvers, and the conditions its arguments must
meet (``amount <= 1000``); and the verdict each risk tier gets by default."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.core.verdicts import Verdict
from tether.tools.registry import Risk

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "in": lambda a, b: a in b,
    "not_in": lambda a, b: a not in b,
    "matches": lambda a, b: isinstance(a, str) and re.fullmatch(b, a) is not None,
}

ConstraintOp = Literal["<", "<=", ">", ">=", "==", "!=", "in", "not_in", "matches"]


@dataclass(frozen=True, kw_only=True)
class Constraint:
    """A condition one argument must meet, e.g. ``amount <= 1000``."""

    argument: str
    op: ConstraintOp
    value: Any

    def violation(self, arguments: Mapping[str, Any]) -> str | None:
        if self.argument not in arguments:
            return f"argument '{self.argument}' is required by the policy"
        actual = arguments[self.argument]
        try:
            ok = _OPS[self.op](actual, self.value)
        except TypeError:
            ok = False
        if ok:
            return None
        return f"argument '{self.argument}'={actual!r} breaks '{self.op} {self.value!r}'"


@dataclass(frozen=True, kw_only=True)
class ToolRule:
    verdict: Verdict | None = None
    constraints: tuple[Constraint, ...] = ()
    approvers: frozenset[str] | None = None


DEFAULT_TIERS: Mapping[Risk, Verdict] = {
    Risk.READ: Verdict.ALLOW,
    Risk.SENSITIVE_READ: Verdict.ALLOW,
    Risk.WRITE: Verdict.ASK,
    Risk.ADMIN: Verdict.ASK,
    Risk.IRREVERSIBLE: Verdict.ASK,
}
