"""The public API is what tether/__init__.py exports; this keeps the list honest and small."""

import inspect
import re

import tether
import tether.errors


def test_all_is_sorted_and_complete() -> None:
    assert tether.__all__ == sorted(tether.__all__)
    public = {n for n in dir(tether) if not n.startswith("_")}
    modules = {n for n in public if inspect.ismodule(getattr(tether, n))}
    # Submodules appear as attributes once imported; only ``errors`` is part of the API.
    assert set(tether.__all__) == (public - modules) | {"errors"}


def test_the_api_stays_small() -> None:
    # A name added here is a promise kept for good; most things belong in their module.
    assert len(tether.__all__) <= 45, len(tether.__all__)


def _written_doc(obj: object) -> str | None:
    """The docstring someone wrote: a dataclass without one gets ``Name(field, ...)``
    generated, which documents nothing."""
    doc = inspect.getdoc(obj)
    if doc is None:
        return None
    name = getattr(obj, "__name__", "")
    if inspect.isclass(obj) and doc.startswith(f"{name}("):
        return None
    return doc


def test_every_export_is_documented() -> None:
    for name in tether.__all__:
        obj = getattr(tether, name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
            assert _written_doc(obj), f"tether.{name} has no docstring of its own"


def test_every_error_is_a_documented_tether_error() -> None:
    errors = [
        obj
        for _, obj in inspect.getmembers(tether.errors, inspect.isclass)
        if obj.__module__ == "tether.errors" and issubclass(obj, BaseException)
    ]
    assert errors
    for cls in errors:
        assert _written_doc(cls), f"tether.errors.{cls.__name__} has no docstring"
        signal = issubclass(cls, tether.errors.Signal)
        assert signal or issubclass(cls, tether.TetherError), cls


def test_importing_tether_loads_nothing_until_a_name_is_used() -> None:
    # `import tether` (and so every `tether` command) must not pay for the whole core: the
    # names load on first use. A fresh interpreter, since this one has loaded everything.
    import subprocess
    import sys

    probe = (
        "import sys, tether; print(sorted(m for m in sys.modules if m.startswith('tether')));"
        "tether.Gate; print('tether.gate.pipeline' in sys.modules, 'tether.cli' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out[0] == "['tether']"
    assert out[1] == "True False"  # using a name loads its module, and only the core


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = tether.Nope


def test_every_error_is_in_the_tree_the_errors_module_draws() -> None:
    doc = tether.errors.__doc__ or ""
    for _, cls in inspect.getmembers(tether.errors, inspect.isclass):
        if cls.__module__ == "tether.errors" and issubclass(cls, BaseException):
            assert re.search(rf"[─ ]{cls.__name__}\b", doc), (
                f"{cls.__name__} is missing from the tree"
            )


def test_no_public_exception_is_defined_outside_the_error_tree() -> None:
    import ast
    from pathlib import Path

    src = Path(tether.__file__).parent
    # Raised inside the gate's dispatch only, and recorded as the cause of a ToolFailed.
    internal = {"UpstreamToolError"}
    found = []
    for path in src.rglob("*.py"):
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {ast.unparse(b) for b in node.bases}
                if bases & {"Exception", "RuntimeError", "ValueError", "LookupError"}:
                    found.append(node.name)
    assert set(found) <= internal, sorted(set(found) - internal)


def test_no_such_run_already_exists_and_store_unreachable_are_different_errors(
    tmp_path: object,
) -> None:
    from pathlib import Path

    from tether.core.principal import Principal
    from tether.errors import AlreadyExists, RunNotFound, StoreUnavailable
    from tether.runs.log import load_result

    assert isinstance(tmp_path, Path)
    kinds = (RunNotFound, AlreadyExists, StoreUnavailable)
    for a in kinds:
        assert not any(issubclass(a, b) for b in kinds if b is not a), a
    store = tether.SQLiteStore(str(tmp_path / "tether.db"))
    gate = tether.Gate(tether.Registry(), tether.Policy(version="p1"), store)
    gate.start_run(Principal(subject="u", tenant="t"), run_id="r1")
    try:
        load_result(store, "no-such-run")
    except Exception as e:
        assert type(e) is RunNotFound, repr(e)
    else:
        raise AssertionError("reading a run that does not exist raised nothing")
    try:
        gate.start_run(Principal(subject="u", tenant="t"), run_id="r1")
    except Exception as e:
        assert type(e) is AlreadyExists, repr(e)
    else:
        raise AssertionError("starting a run twice raised nothing")
    (tmp_path / "a-directory.db").mkdir()
    try:
        tether.SQLiteStore(str(tmp_path / "a-directory.db"))
    except Exception as e:
        assert type(e) is StoreUnavailable, repr(e)
    else:
        raise AssertionError("opening a directory as a store raised nothing")
