"""The distribution as the index would show it: its name, its version from one place, its
metadata, and a long description whose every link works off the repository."""

from __future__ import annotations

import re
from importlib.metadata import metadata, version

import tether

DIST = "tether-gate"


def test_one_version_everywhere() -> None:
    assert tether.__version__ == version(DIST) != "0+unknown"


def test_the_metadata_says_what_this_is() -> None:
    meta = metadata(DIST)
    assert meta["Name"] == DIST and meta["Requires-Python"] == ">=3.11"
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers and any("Apache" in c for c in classifiers)
    assert "mcp" in (meta["Keywords"] or "").split(",")


def test_the_long_description_links_nowhere_relative() -> None:
    # The long description is the metadata's body (Description-Content-Type: markdown).
    text = metadata(DIST).json["description"]
    assert isinstance(text, str) and "## The two commands" in text
    targets = re.findall(r"\]\(([^)\s]+)", text) + re.findall(r'src="([^"]+)"', text)
    relative = [t for t in targets if not re.match(r"(https?:|mailto:|#)", t)]
    assert relative == [], f"links that break off the repository: {relative}"
