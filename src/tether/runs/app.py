"""An app: what the command line needs to run an agent — tools, policy, model, principal.

``--app module:attribute`` names one, the way uvicorn and celery find an application; the
attribute is an ``App`` or a function of no arguments that returns one.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tether.core.budget import Budget
from tether.core.principal import Principal
from tether.errors import ConfigurationError
from tether.gate.pipeline import Gate
from tether.models import Model
from tether.policy.rules import Policy
from tether.runs.runner import Runner
from tether.store.base import Store
from tether.tools.registry import Registry


@dataclass(kw_only=True)
class App:
    """What `tether run --app module:attr` needs: tools, policy, a model factory, the
    principal the agent acts for, and the run's limits."""

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

    def __post_init__(self) -> None:
        problem = _app_problem(self)
        if problem is not None:
            raise ConfigurationError(f"App: {problem}")

    def gate(self, store: Store) -> Gate:
        if self.on_open is not None:
            self.on_open(store)
        return Gate(self.registry, self.policy, store)

    def runner(self, store: Store, **options: Any) -> Runner:
        model = self.model()
        if not callable(getattr(model, "complete", None)):
            raise ConfigurationError(
                f"App: model() returned a {type(model).__name__}, which has no complete() "
                "method; model must be a function of no arguments returning a model, e.g. "
                "model=lambda: ScriptedModel([...])"
            )
        return Runner(
            self.gate(store),
            model,
            system=self.system,
            max_turns=self.max_turns,
            **options,
        )


def _app_problem(app: App) -> str | None:
    """What is wrong with an App's fields, said with the fix (a raw TypeError deep inside a
    run, long after the App was built, would not say which field was wrong)."""
    model_kind = type(app.model).__name__
    is_instance = not isinstance(app.model, type) and callable(getattr(app.model, "complete", None))
    if is_instance or not callable(app.model):
        # An instance would be shared by every run (and every worker thread): a factory
        # gives each runner its own.
        return (
            f"model is a {model_kind} instance, but App wants a function of no arguments that "
            f"returns a model, one per run: write model=lambda: {model_kind}(...)"
        )
    expected: tuple[tuple[str, Any, type | tuple[type, ...], str], ...] = (
        ("registry", app.registry, Registry, "a tether.tools.registry.Registry with the tools"),
        (
            "policy",
            app.policy,
            Policy,
            "a tether.policy.rules.Policy (e.g. Policy.from_toml(path))",
        ),
        ("principal", app.principal, Principal, "a tether.policy.rules.Principal"),
        ("budget", app.budget, Budget, "a tether.core.budget.Budget"),
        ("system", app.system, str, "the system prompt as text"),
    )
    for name, value, kind, wanted in expected:
        if not isinstance(value, kind):
            return f"{name} is a {type(value).__name__}; it must be {wanted}"
    if isinstance(app.max_turns, bool) or not isinstance(app.max_turns, int) or app.max_turns < 1:
        return f"max_turns is {app.max_turns!r}; it must be a whole number of turns, at least 1"
    if app.on_open is not None and not callable(app.on_open):
        return f"on_open is a {type(app.on_open).__name__}; it must be a function of the store"
    return None


EXPECTED = "module:attribute naming a tether App, or a function of no arguments returning one"


def load_app(reference: str) -> App:
    """The ``App`` that ``module:attribute`` names, imported as uvicorn does: the working
    directory comes first on the import path, so ``--app myagent:app`` finds ./myagent.py."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"--app {reference!r} is not {EXPECTED}")
    target = getattr(_import(module_name), attribute, _MISSING)
    if target is _MISSING:
        raise ConfigurationError(
            f"module {module_name!r} has no attribute {attribute!r}; --app wants {EXPECTED}"
        )
    app = target if isinstance(target, App) else _call_factory(reference, target)
    if not isinstance(app, App):
        raise ConfigurationError(
            f"--app {reference} gave a {type(app).__name__}, not a tether App; "
            f"--app wants {EXPECTED}"
        )
    return app


_MISSING = object()


def _import(module_name: str) -> Any:
    cwd = os.getcwd()
    if not sys.path or sys.path[0] != cwd:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except Exception as e:  # the app's own code: whatever it raises, say so in one sentence
        raise ConfigurationError(
            f"importing {module_name!r} for --app failed ({type(e).__name__}: {e}); "
            "fix the module, or run from the folder that holds it"
        ) from e


def _call_factory(reference: str, target: Any) -> Any:
    if not callable(target):
        return target
    try:
        inspect.signature(target).bind()
    except TypeError:
        raise ConfigurationError(
            f"--app {reference} needs arguments to be called; --app wants {EXPECTED}"
        ) from None
    except ValueError:  # no signature to inspect (some builtins): calling will tell
        pass
    try:
        return target()
    except Exception as e:
        raise ConfigurationError(
            f"--app {reference} raised {type(e).__name__} when called ({e}); --app wants {EXPECTED}"
        ) from e
