"""An app: what the command line needs to run an agent — tools, policy, model, principal.

``--app module:attribute`` names one, the way uvicorn and celery find an application; the
attribute is an ``App`` or a function of no arguments that returns one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.budget import Budget
from tether.errors import ConfigurationError
from tether.gate import Gate
from tether.models import Model
from tether.policy import Policy, Principal
from tether.runs import Runner
from tether.store.base import Store
from tether.tools import Registry


@dataclass(kw_only=True)
class App:
    registry: Registry
    policy: Policy
    model: Callable[[], Model]
    principal: Principal
    system: str = ""
    max_turns: int = 8
    budget: Budget = field(default_factory=Budget)
    # Called with the store the command line opened, before anything runs (e.g. to place
    # the app's own files beside it).
    on_open: Callable[[Store], None] | None = None

    def gate(self, store: Store) -> Gate:
        if self.on_open is not None:
            self.on_open(store)
        return Gate(self.registry, self.policy, store)

    def runner(self, store: Store, **options: Any) -> Runner:
        return Runner(
            self.gate(store),
            self.model(),
            system=self.system,
            max_turns=self.max_turns,
            **options,
        )


def load_app(reference: str) -> App:
    """The ``App`` that ``module:attribute`` names."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"--app {reference!r} must look like module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigurationError(f"cannot import {module_name!r} for --app: {e}") from e
    try:
        target = getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(f"module {module_name!r} has no attribute {attribute!r}") from None
    app = target() if callable(target) and not isinstance(target, App) else target
    if not isinstance(app, App):
        raise ConfigurationError(f"{reference} is a {type(app).__name__}, not a tether App")
    return app
