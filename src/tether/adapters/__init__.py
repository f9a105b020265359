"""Adapters that put tether's gate under the tools of agents written in other frameworks."""
