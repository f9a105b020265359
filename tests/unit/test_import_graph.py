"""tether's floor plan, read from its imports: no module imports another that (directly or
not) imports it back, and each part imports only the parts beneath it.

Every import counts — at module level, inside a function (a lazy import) or under
``if TYPE_CHECKING:`` — because each is a dependency a reader has to follow, and a circle
hidden behind a lazy import is still a circle. A package's ``__init__`` importing its own
submodules (its face) is not a dependency of those submodules, so that edge is left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tether"

# The parts, lowest first. A module may import its own part and any part of a lower layer;
# the core never imports what is built on it. (``evidence`` and ``store`` share a layer: the
# store checks row digests with the evidence module, and checkpoints read a store.)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("tether.errors", "tether.crash", "tether.extras"),
    ("tether.core",),
    ("tether.tools", "tether.models", "tether.telemetry"),
    ("tether.policy",),
    ("tether.evidence", "tether.store"),
    ("tether.identity", "tether.gate"),
    ("tether.runs",),
    # The entrances: what users import and run.
    ("tether.adapters", "tether.mcp", "tether.web", "tether.compat", "tether.demo"),
    ("tether.cli", "tether.__main__"),
)
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in SRC.rglob("*.py")}


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest module of tether's that ``name`` (a module or a name in one) is in."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every tether module ``module`` imports, wherever the import statement is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from pkg import submodule`` needs the submodule; ``from pkg import name``
            # needs the package.
            targets = [f"{node.module}.{a.name}" for a in node.names]
        for target in targets:
            hit = resolve(target, known)
            if hit is not None and hit != module and not is_face(module, hit, known):
                found.add(hit)
    return found


def is_face(importer: str, imported: str, known: dict[str, Path]) -> bool:
    """Whether this is a package's ``__init__`` importing its own submodule."""
    return known[importer].name == "__init__.py" and imported.startswith(importer + ".")


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(m, p, known) for m, p in known.items()}


def part_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def test_no_import_circles_counting_lazy_and_type_only_imports() -> None:
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                cycle = [*stack[stack.index(n) :], n]
                raise AssertionError("import circle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_every_part_has_a_layer() -> None:
    parts = {part_of(m) for m in modules()} - {"tether"}
    assert parts <= set(RANK), f"parts without a layer in LAYERS: {sorted(parts - set(RANK))}"


def test_each_part_imports_only_the_parts_beneath_it() -> None:
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph().items()
        if module != "tether"  # the package's face names the public API of every part
        for target in targets
        if part_of(target) != part_of(module) and RANK[part_of(target)] > RANK[part_of(module)]
    )
    assert upward == [], "imports from a part up to one built on it:\n" + "\n".join(upward)


def test_the_top_level_is_a_short_list_of_parts() -> None:
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= 8, top


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=module_name)
def test_a_long_module_says_why_it_is_long(path: Path) -> None:
    lines = path.read_text().splitlines()
    assert len(lines) <= 600, f"{module_name(path)} has {len(lines)} lines; split it"
    if len(lines) > 400:
        doc = ast.get_docstring(ast.parse("\n".join(lines))) or ""
        assert "long because" in " ".join(doc.lower().split()), (
            f"{module_name(path)} has {len(lines)} lines: say in its docstring why it is long "
            "('... is long because ...') or split it"
        )


def test_the_checker_sees_a_circle_hidden_behind_a_lazy_import(tmp_path: Path) -> None:
    # The checker itself: a circle made only of a function-level and a TYPE_CHECKING import.
    a = tmp_path / "a.py"
    b = tmp_path / "b.py"
    a.write_text("def f():\n    import tether.b\n")
    b.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tether.a\n")
    known = {"tether.a": a, "tether.b": b}
    assert imports("tether.a", a, known) == {"tether.b"}
    assert imports("tether.b", b, known) == {"tether.a"}
