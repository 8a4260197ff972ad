"""Key-level differences between two parsed plans, for amendments and for ``prereg verify``."""

from __future__ import annotations

from typing import Any

from .tomlpos import format_path

_MISSING = object()


def flatten(data: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    """Leaves of nested tables; arrays of tables are indexed, arrays of scalars are one value."""
    out: dict[tuple, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, prefix + (k,)))
        if not data and prefix:
            out[prefix] = {}
    elif isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        for i, v in enumerate(data):
            out.update(flatten(v, prefix + (i,)))
    else:
        out[prefix] = data
    return out


def changed_keys(old: Any, new: Any) -> list[dict[str, Any]]:
    """``[{"key": "contrasts[0].margin", "old": 0.02, "new": 0.01}, ...]`` in key order.

    An added key has no ``old``; a removed key has no ``new``.
    """
    a, b = flatten(old), flatten(new)
    out = []
    for path in sorted(set(a) | set(b), key=lambda p: [(isinstance(x, int), x) for x in p]):
        va, vb = a.get(path, _MISSING), b.get(path, _MISSING)
        if va != vb or type(va) is not type(vb):
            row: dict[str, Any] = {"key": format_path(path)}
            if va is not _MISSING:
                row["old"] = va
            if vb is not _MISSING:
                row["new"] = vb
            out.append(row)
    return out


def describe(change: dict[str, Any]) -> str:
    """One line: ``key: old → new`` (or added / removed)."""
    if "old" not in change:
        return f"{change['key']}: added ({change['new']!r})"
    if "new" not in change:
        return f"{change['key']}: removed (was {change['old']!r})"
    return f"{change['key']}: {change['old']!r} → {change['new']!r}"
