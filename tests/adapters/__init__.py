"""Adapters over the real frameworks: each module skips if its framework is missing."""
