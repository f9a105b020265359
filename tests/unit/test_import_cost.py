"""What importing tether's judging modules loads: none of the heavy dependencies, which are
imported where they are first needed (a schema checked, a policy file parsed, code sandboxed,
a checkpoint signed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

MODULES = [
    "tether.core.approvals",
    "tether.core.budget",
    "tether.core.digest",
    "tether.evidence.keys",
    "tether.tools.limits",
    "tether.models",
    "tether.models.scripted",
    "tether.policy.rules",
    "tether.compat.sandbox",
    "tether.core.screening",
    "tether.gate.state",
    "tether.tools.tenancy",
    "tether.tools.registry",
    "tether.tools.schema",
]
HEAVY = ["pydantic", "pydantic_core", "jsonschema", "pydantic_monty", "cryptography", "asyncio"]


# The package itself, without running its __init__ (which re-exports the gate and more):
# what is measured is these modules' own imports.
_BARE_PACKAGE = (
    "import importlib.util, sys\n"
    "spec = importlib.util.find_spec('tether')\n"
    "sys.modules['tether'] = importlib.util.module_from_spec(spec)\n"
)


def _loaded_after(code: str) -> set[str]:
    probe = f"{_BARE_PACKAGE}{code}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    return set(out.split())


def test_judging_modules_load_no_heavy_dependency() -> None:
    loaded = _loaded_after("\n".join(f"import {m}" for m in MODULES))
    assert sorted(loaded & set(HEAVY)) == []


def test_parsing_a_policy_file_is_what_loads_pydantic() -> None:
    loaded = _loaded_after(
        "from tether.policy.rules import Policy\n"
        'Policy.from_toml(\'version = "p1"\\napprovers = ["a"]\')'
    )
    assert "pydantic" in loaded


def test_sandbox_without_its_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tether.compat import sandbox

    monkeypatch.setitem(sys.modules, "pydantic_monty", None)  # import now raises ImportError
    with pytest.raises(ImportError, match=r"pip install -e '\.\[sandbox\]'"):
        sandbox.sandboxed_eval("1 + 1")
