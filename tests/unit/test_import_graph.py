"""tether's modules import each other without cycles, and the core never imports the parts
built on it (the command line, the demo, the seeds' APIs, model adapters).

Only imports that run when a module loads count: those at module level, outside
``if TYPE_CHECKING:``. An import inside a function is a deliberate lazy edge and is left out.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "tether"
# Built on the core; nothing in the core may import them at load time.
OUTER = (
    "tether.__main__",
    "tether.cli",
    "tether.demo",
    "tether.compat",
    "tether.models.openai",
    "tether.models.anthropic",
    "tether.adapters.langgraph",
    "tether.adapters.openai_agents",
    "tether.adapters.pydantic_ai",
    "tether.web",
    "tether.mcp",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def load_time_imports(path: Path, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, ast.FunctionDef | ast.ClassDef) else ():
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                break
            names: list[str] = []
            if isinstance(sub, ast.Import):
                names = [a.name for a in sub.names]
            elif isinstance(sub, ast.ImportFrom) and sub.module and sub.level == 0:
                # ``from pkg import submodule`` needs the submodule, not the package's own
                # names; ``from pkg import name`` needs the package.
                for a in sub.names:
                    full = f"{sub.module}.{a.name}"
                    names.append(full if full in modules else sub.module)
            found |= {n for n in names if n in modules}
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(files)
    # A submodule always loads its parent packages first; that edge is Python's, not a
    # design choice.
    return {m: load_time_imports(p, modules) - {m, *parents(m)} for m, p in files.items()}


def parents(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def fresh_graph() -> dict[str, set[str]]:
    """``graph()`` computed in a fresh interpreter: CPython 3.11's ``ast`` can be left in a
    bad state by an earlier test that hit a recursion limit while building an AST
    ("AST constructor recursion depth mismatch"), which says nothing about tether."""
    probe = (
        "import json; from tests.unit.test_import_graph import graph; "
        "print(json.dumps({m: sorted(i) for m, i in graph().items()}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=SRC.parents[1],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return {m: set(i) for m, i in json.loads(out).items()}


def test_no_import_cycles() -> None:
    edges = fresh_graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                cycle = [*stack[stack.index(n) :], n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_the_core_does_not_import_what_is_built_on_it() -> None:
    edges = fresh_graph()
    for module, imports in edges.items():
        if module == "tether" or module.startswith(OUTER):
            continue
        outer = sorted(i for i in imports if i.startswith(OUTER))
        assert not outer, f"{module} imports {outer} at load time"
