"""Where a tool's tenant sits in its arguments, and binding a call to the principal's tenant.

A tool that touches tenant data says where the tenant is (``tenant_path="query.tenant"``) or
that it is not tenant-scoped (``tenant_scoped=False``); one whose schema has a tenant-looking
argument and says neither is refused at registration, because guessing ("an argument named
``tenant``") is how ``tenant_id`` or a nested ``{"query": {"tenant": ...}}`` slipped past.

At call time the gate fills a missing tenant from the principal — never from the tool's
default, which may belong to someone else — and the policy denies a tenant that is not the
principal's, wherever the path puts it. Any other tenant-looking key in the arguments, at any
depth (a ``target_tenant`` beside the declared path, a ``tenant`` inside a free-form object),
must name the principal's tenant too: checked at call time rather than refused at
registration, because a free-form object's keys are only known when it arrives. A tool
declared ``tenant_scoped=False`` is exempt. All of this is pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from tether.errors import ConfigurationError

# Argument names that hold a tenant under some spelling.
TENANT_LIKE = re.compile(r"tenant|^(org|organi[sz]ation|workspace)(_?id)?$", re.IGNORECASE)


def split_path(path: str) -> tuple[str, ...]:
    parts = tuple(path.split("."))
    if not path or any(not p for p in parts):
        raise ConfigurationError(
            f"tenant_path {path!r} must be argument names joined by '.', e.g. 'query.tenant'"
        )
    return parts


def tenant_like_arguments(schema: Mapping[str, Any]) -> list[str]:
    """Dotted paths of every property in ``schema`` whose name looks like a tenant."""
    paths = _property_paths(schema, schema, ())
    return sorted({".".join(p) for p in paths if TENANT_LIKE.search(p[-1])})


def has_property(schema: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    """Whether arguments may hold a value at ``path``: a declared property, or a key of an
    object that takes any keys (``dict[str, str]``)."""
    node: Any = _deref(schema, schema)
    for part in path:
        properties = node.get("properties") if isinstance(node, Mapping) else None
        if isinstance(properties, Mapping) and part in properties:
            node = _deref(schema, properties[part])
        elif isinstance(node, Mapping) and node.get("additionalProperties") not in (None, False):
            node = _deref(schema, node["additionalProperties"])
        else:
            return path in set(_property_paths(schema, schema, ()))  # e.g. under anyOf
    return True


def _deref(root: Mapping[str, Any], node: Any) -> Any:
    for _ in range(16):
        ref = node.get("$ref") if isinstance(node, Mapping) else None
        if not (isinstance(ref, str) and ref.startswith("#/")):
            return node
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        node = target
    return node


def _property_paths(
    root: Mapping[str, Any], node: Any, prefix: tuple[str, ...], depth: int = 0
) -> Iterator[tuple[str, ...]]:
    if not isinstance(node, Mapping) or depth > 16:
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        yield from _property_paths(root, target, prefix, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        for option in node.get(key, ()) or ():
            yield from _property_paths(root, option, prefix, depth + 1)
    properties = node.get("properties")
    if isinstance(properties, Mapping):
        for name, sub in properties.items():
            path = (*prefix, str(name))
            yield path
            yield from _property_paths(root, sub, path, depth + 1)


_MISSING = object()


def tenant_like_values(
    arguments: Mapping[str, Any], declared: tuple[str, ...] | None
) -> Iterator[tuple[str, Any]]:
    """Every value under a tenant-looking key in ``arguments``, at any depth, free-form
    objects and lists included, except at the ``declared`` tenant path: (dotted path, value).
    A ``target_tenant`` beside the declared ``tenant``, or ``{"query": {"tenant": ...}}`` in
    a free-form object, names a tenant the policy must see."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(arguments, ())]
    while stack:
        node, where = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                here = (*where, str(key))
                if TENANT_LIKE.search(str(key)) and here != declared:
                    yield ".".join(here), value
                if isinstance(value, Mapping | list):
                    stack.append((value, here))
        elif isinstance(node, list):
            stack.extend((item, where) for item in node if isinstance(item, Mapping | list))


def tenant_at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """The value at ``path``, or ``MISSING`` if some part of the path is absent."""
    node: Any = arguments
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def is_missing(value: Any) -> bool:
    return value is _MISSING


def fill_tenant(arguments: Mapping[str, Any], path: tuple[str, ...], tenant: str) -> dict[str, Any]:
    """``arguments`` with the principal's tenant at ``path`` if nothing is there (objects on
    the way are created); unchanged where a value is present, even a wrong one: denying that
    is the policy's job, and it must see what the agent asked for."""
    if not is_missing(tenant_at(arguments, path)):
        return dict(arguments)
    out = dict(arguments)
    node = out
    for part in path[:-1]:
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, Mapping):
            return out  # not an object: the schema check will say so
        node[part] = dict(child)
        node = node[part]
    node[path[-1]] = tenant
    return out
