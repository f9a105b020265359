"""The public API is what tether/__init__.py exports; this keeps the list honest and small."""

import inspect

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
