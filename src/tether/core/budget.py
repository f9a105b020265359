"""Budgets of steps, cost and result bytes, as values.

A budget is immutable: ``spend`` returns the budget after spending, so the run's checkpoint can
store it and a failed transaction leaves nothing half-spent. Every check raises with the
numbers, because "budget exceeded" alone tells an operator nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tether.core.digest import evolve
from tether.errors import BudgetExceeded, ConfigurationError


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Limits (``None`` = unlimited) and what has been used of them."""

    max_steps: int | None = None
    max_cost: int | None = None
    max_bytes: int | None = None
    steps: int = 0
    spent: int = 0
    bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_cost", "max_bytes"):
            limit = getattr(self, name)
            if limit is not None and limit < 0:
                raise ConfigurationError(f"budget {name} must be >= 0, got {limit}")

    @property
    def remaining(self) -> int | None:
        return None if self.max_cost is None else self.max_cost - self.spent

    def check_step(self, action: str) -> None:
        if self.max_steps is not None and self.steps + 1 > self.max_steps:
            raise BudgetExceeded("step", action, 1, self.max_steps - self.steps)

    def step(self, action: str) -> Budget:
        self.check_step(action)
        return evolve(self, steps=self.steps + 1)

    def check_spend(self, action: str, cost: int) -> None:
        remaining = self.remaining
        if remaining is not None and cost > remaining:
            raise BudgetExceeded("cost", action, cost, remaining)

    def spend(self, action: str, cost: int) -> Budget:
        self.check_spend(action, cost)
        return evolve(self, spent=self.spent + cost)

    def refund(self, cost: int) -> Budget:
        return replace(self, spent=max(0, self.spent - cost))

    def check_bytes(self, action: str, size: int) -> None:
        if self.max_bytes is not None and self.bytes + size > self.max_bytes:
            raise BudgetExceeded("byte", action, size, self.max_bytes - self.bytes)

    def add_bytes(self, size: int) -> Budget:
        return replace(self, bytes=self.bytes + size)

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_steps": self.max_steps,
            "max_cost": self.max_cost,
            "max_bytes": self.max_bytes,
            "steps": self.steps,
            "spent": self.spent,
            "bytes": self.bytes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Budget:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
