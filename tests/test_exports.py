"""The public API is what tether/__init__.py exports; this keeps the list honest."""

import tether


def test_all_is_sorted_and_complete() -> None:
    assert tether.__all__ == sorted(tether.__all__)
    public = {n for n in dir(tether) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(tether, n)).__name__ == "module"}
    assert set(tether.__all__) == public - modules


def test_every_export_is_documented() -> None:
    for name in tether.__all__:
        obj = getattr(tether, name)
        if callable(obj):
            assert obj.__doc__, f"{name} has no docstring"
