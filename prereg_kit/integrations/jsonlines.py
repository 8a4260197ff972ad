"""JSON-lines files as the tools write them, read line by line, with every number's text kept.

verl's file logger and validation dumps, W&B histories exported as lines and outputs files are
JSON lines. A refusal names the file, the line, the key and the value *as written*: a number is
parsed into :class:`WrittenFloat` / :class:`WrittenInt`, a ``float`` / ``int`` that keeps its
text (``1e300``, ``NaN``, ``30798``), so a message never shows a number the reader computed
from it. :func:`written` gives that text for any parsed value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import PreregError


class WrittenFloat(float):
    """A float that remembers how the file wrote it (``text``)."""

    text: str


class WrittenInt(int):
    """An integer that remembers how the file wrote it (``text``)."""

    text: str


def _float(text: str) -> WrittenFloat:
    v = WrittenFloat(text)
    v.text = text
    return v


def _int(text: str) -> WrittenInt:
    v = WrittenInt(text)
    v.text = text
    return v


# Python's json reads the non-standard NaN, Infinity and -Infinity (W&B exports and json.dumps
# write them); they are kept as floats and refused by the key that needs a number
_DECODER = json.JSONDecoder(parse_float=_float, parse_int=_int, parse_constant=_float)


def is_number(value: Any) -> bool:
    """A JSON number (``true`` and ``false`` are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite(value: Any) -> bool:
    """A JSON number that a float holds: not NaN or infinite, nor an integer beyond a float's range."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def written(value: Any, limit: int = 60) -> str:
    """The value as the JSON line wrote it: a number's own text, ``null``, ``true``, a quoted
    string; an object or list shortened to ``limit`` characters, a longer number to its first
    20 and its length."""
    text = getattr(value, "text", None)
    if isinstance(text, str):
        return text if len(text) <= limit else f"{text[:20]}... ({len(text)} characters)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a numpy scalar: its Python value
        try:
            return written(value.item(), limit)
        except (TypeError, ValueError):
            pass
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of a JSON-lines file, numbers kept
    with their text (see the module docstring). Refused, naming the file and line: a missing
    file or a folder, bytes that are not UTF-8, a line that is not JSON (or nested or long
    beyond what the parser takes)."""
    p = Path(path)
    if not p.is_file():  # the path as typed, not an internal error from open()
        raise PreregError(f"{p}: no such file" if not p.exists() else f"{p}: a folder, not a JSON-lines file")
    with open(p, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise PreregError(f"{p}:{n}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}): "
                                  "a JSON-lines file is text") from None
            if not line.strip():
                continue
            try:
                yield n, _DECODER.decode(line.lstrip("\ufeff") if n == 1 else line)
            except json.JSONDecodeError as e:
                raise PreregError(f"{p}:{n}: not a JSON line ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise PreregError(f"{p}:{n}: not a JSON line (nested deeper than the parser goes)") from None
            except ValueError as e:  # an integer of more digits than Python converts
                raise PreregError(f"{p}:{n}: not a JSON line ({' '.join(str(e).split())[:120]})") from None


__all__ = ["WrittenFloat", "WrittenInt", "finite", "is_number", "json_lines", "written"]
