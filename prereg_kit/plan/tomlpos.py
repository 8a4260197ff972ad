"""Line numbers of keys in a TOML document.

``tomllib`` gives values but no positions; validation errors should still name the line. This is a
line scanner for the TOML that people write in plan files (tables, arrays of tables, dotted keys,
multi-line arrays and strings). Positions inside inline tables map to the line of their key.
"""

from __future__ import annotations

import re
import tomllib

# The name ends at its last non-space character: a lazy ``[^\]]+?\s*\]`` would be quadratic in
# the spaces of a long header.
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]*[^\]\s])\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"""^\s*((?:[A-Za-z0-9_\-]+|"(?:[^"\\]|\\.)*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|"(?:[^"\\]|\\.)*"|'[^']*'))*)\s*=""")
_PART = re.compile(r"""[A-Za-z0-9_\-]+|"(?:[^"\\]|\\.)*"|'[^']*'""")


def _split_key(key: str) -> tuple[str, ...]:
    return tuple(_unquote(p) for p in _PART.findall(key))


def _unquote(part: str) -> str:
    """A key part as tomllib reads it: quotes removed, escapes of a basic string decoded."""
    if part.startswith('"') and "\\" in part:
        try:
            return tomllib.loads(f"k = {part}")["k"]
        except tomllib.TOMLDecodeError:
            pass
    return part[1:-1] if part[:1] in "\"'" and len(part) >= 2 else part


def key_lines(text: str) -> dict[tuple, int]:
    """Map each key path to its 1-based line.

    Paths use ints for array-of-table positions: ``("contrasts", 0, "margin")``. A table header
    maps its own path too.
    """
    lines: dict[tuple, int] = {}
    counts: dict[tuple, int] = {}
    below: dict[tuple, set[tuple]] = {}  # path → the longer paths one key deeper that were seen
    table: tuple = ()
    in_multiline: str | None = None
    depth = 0  # open brackets of a multi-line array/inline value
    for no, line in enumerate(text.splitlines(), start=1):
        if in_multiline:
            if in_multiline in line:
                in_multiline = None
            continue
        if depth > 0:
            depth += _bracket_balance(line)
            continue
        m = _HEADER.match(line)
        if m:
            path = _split_key(m.group(2))
            if m.group(1) == "[[":
                idx = counts.get(path, 0)
                counts[path] = idx + 1
                # nested arrays of tables reset when their parent entry changes (linear overall:
                # each forgotten path was added once)
                stack = list(below.pop(path, ()))
                while stack:
                    k = stack.pop()
                    counts.pop(k, None)
                    stack.extend(below.pop(k, ()))
                for i in range(1, len(path)):
                    below.setdefault(path[:i], set()).add(path[: i + 1])
                table = _resolve(path, counts, array=True)
            else:
                table = _resolve(path, counts, array=False)
            lines.setdefault(table, no)
            continue
        m = _KEY.match(line)
        if m:
            path = table + _split_key(m.group(1))
            lines.setdefault(path, no)
            rest = line[m.end():]
            for quote in ('"""', "'''"):
                if rest.count(quote) == 1:
                    in_multiline = quote
            if in_multiline is None:
                depth = _bracket_balance(rest)
    return lines


def _resolve(path: tuple, counts: dict[tuple, int], *, array: bool) -> tuple:
    """Insert array indices for every prefix of ``path`` that is an array of tables."""
    out: list = []
    for i in range(1, len(path) + 1):
        out.append(path[i - 1])
        prefix = path[:i]
        if prefix in counts and (i < len(path) or array):
            out.append(counts[prefix] - 1)
    return tuple(out)


def _bracket_balance(s: str) -> int:
    """Net count of opening brackets outside strings and comments."""
    bal, quote = 0, None
    for ch in s:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            break
        elif ch in "[{":
            bal += 1
        elif ch in "]}":
            bal -= 1
    return bal


def line_of(lines: dict[tuple, int], path: tuple) -> int | None:
    """Line of ``path`` or of its nearest ancestor that has one."""
    for i in range(len(path), 0, -1):
        if path[:i] in lines:
            return lines[path[:i]]
    return None


def format_path(path: tuple) -> str:
    """``("contrasts", 0, "margin")`` → ``contrasts[0].margin``."""
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out or "(top level)"
