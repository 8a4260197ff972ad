"""Reading a plan file: bounded TOML parsing, document checks, validation, and every error as
``FILE:LINE: key.path: message``."""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from ..errors import PlanError
from .canonical import content_hash, sha256_hex
from .crosscheck import cross_check
from .fields import INT_MAX, INT_MIN, MAX_DEPTH, MAX_PLAN_BYTES, PLAN_FILE, _short
from .schema import Plan
from .tomlpos import key_lines, line_of

# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class PlanFile:
    """A plan as read from disk: raw bytes, parsed TOML, the validated plan and its hashes."""

    path: Path
    raw: bytes
    data: dict[str, Any]
    plan: Plan

    @property
    def raw_sha256(self) -> str:
        return sha256_hex(self.raw)

    @property
    def content_sha256(self) -> str:
        return content_hash(self.data)


def read_toml(path: str | Path) -> tuple[bytes, dict[str, Any]]:
    """Raw bytes and parsed TOML of a plan file, within the plan limits (:func:`parse_toml`).

    At most ``MAX_PLAN_BYTES`` + 1 bytes are read, so a huge file (or ``/dev/zero``) is refused
    without reading it all.
    """
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_PLAN_BYTES + 1)
    except FileNotFoundError:
        raise PlanError(f"{p}: no such plan file") from None
    except IsADirectoryError:
        raise PlanError(f"{p}: is a folder, not a plan file") from None
    except OSError as e:
        raise PlanError(f"{p}: cannot read the plan file: {e.strerror or e}") from None
    return raw, parse_toml(raw, source=str(p))


def parse_toml(raw: bytes, *, source: str = "plan") -> dict[str, Any]:
    """Parse a plan's bytes; every problem is a one-line :class:`PlanError` naming ``source``.

    Checked in this order, each in linear time: size (``MAX_PLAN_BYTES``), UTF-8, nesting of
    brackets and dotted keys (``MAX_DEPTH``, before tomllib: see :func:`_too_nested`), TOML syntax,
    then :func:`document_problems` on the parsed tables (depth, finite numbers, 64-bit integers).
    """
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanError(f"{source}: larger than {MAX_PLAN_BYTES} bytes, the most a plan file may hold")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(f"{source}: not UTF-8 text (byte {e.start})") from None
    deep = _too_nested(text, MAX_DEPTH)
    if deep is not None:
        raise PlanError(f"{source}:{deep[0]}: {deep[1]}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if m:
            msg = msg[: m.start()].strip()
            raise PlanError(f"{source}:{m.group(1)}: TOML syntax error: {msg} (column {m.group(2)})") from None
        raise PlanError(f"{source}: TOML syntax error: {msg}") from None
    except RecursionError:  # not reached after _too_deep; kept so that no input gives a traceback
        raise PlanError(f"{source}: arrays or inline tables nested too deep to parse") from None
    problems = document_problems(data)
    if problems:
        raise PlanError(*_lines(problems, source, text))
    return data


# What changes the scanner's state outside strings; inside basic strings, escapes and the end.
_SCAN = re.compile(r"""["'#\[\]{}.=,\n]""")
_SCAN_BASIC = re.compile(r'\\.|["\n]', re.S)
_SCAN_ML_BASIC = re.compile(r'\\.|"""', re.S)
_SCAN_LITERAL = re.compile(r"['\n]")


def _too_nested(text: str, limit: int) -> tuple[int, str] | None:
    """(line, what) where the text first nests deeper than ``limit``, before any parsing; else None.

    A linear scan that follows TOML's four string forms and comments. It counts ``[`` / ``{``
    (tomllib recurses once per level) and the dots of one dotted key (tomllib's dotted keys take
    time quadratic in their length): outside strings, a float or time has one dot, so more than
    ``limit`` dots between two of ``= , [ ] { }`` or a line end can only be a key that nests
    deeper than ``limit``. Bracket depth never drops below 0, so it never under-counts what
    tomllib would see; table headers count like arrays.
    """
    depth, dots, i, n = 0, 0, 0, len(text)

    def line(at: int) -> int:
        return text.count("\n", 0, at) + 1

    while (m := _SCAN.search(text, i)) is not None:
        ch, i = m.group(), m.end()
        if ch == ".":
            dots += 1
            if dots > limit:
                return line(m.start()), f"a dotted key with more than {limit + 1} parts"
            continue
        if ch in "[{":
            depth += 1
            if depth > limit:
                return line(m.start()), f"arrays or inline tables nested more than {limit} deep"
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "#":
            i = text.find("\n", i)
            if i < 0:
                return None
        elif ch in "\"'" and text.startswith(ch * 3, m.start()):  # ends at the next triple quote
            if ch == '"':
                i += 2
                while (e := _SCAN_ML_BASIC.search(text, i)) is not None and e.group() != '"""':
                    i = e.end()
                end = e.start() if e is not None else -1
            else:
                end = text.find("'''", i + 2)
            if end < 0:
                return None
            i = end + 3
            while i < n and i < end + 5 and text[i] == ch:  # up to two more quotes end the content
                i += 1
            continue  # a quoted key part keeps the dot count of its key
        elif ch == '"':
            while (e := _SCAN_BASIC.search(text, i)) is not None and e.group()[0] == "\\":
                i = e.end()
            if e is None:
                return None
            i = e.end()
            if e.group() == '"':
                continue
        elif ch == "'":  # a literal string ends at the next quote or at the end of the line
            e = _SCAN_LITERAL.search(text, i)
            if e is None:
                return None
            i = e.end()
            if e.group() == "'":
                continue
        dots = 0  # any of = , [ ] { } # or a line end ends a key
    return None


def document_problems(data: Any) -> list[tuple[tuple, str]]:
    """Problems of parsed TOML anywhere in the document, as (key path, message) pairs.

    Tables and arrays nested more than ``MAX_DEPTH`` deep (dotted keys nest without brackets),
    floats that are nan or ±inf (canonical JSON, and so the lock, cannot hold them), and integers
    outside TOML's 64-bit range. Iterative, so a deep document cannot exhaust the stack; a path is
    built only for a problem.
    """
    problems: list[tuple[tuple, str]] = []

    def path_of(link: tuple | None) -> tuple:
        parts = []
        while link is not None:
            link, key = link
            parts.append(key)
        return tuple(reversed(parts))

    # (container, its depth, link): a link is (parent link, key), None for the document
    stack: list[tuple[Any, int, tuple | None]] = [(data, 0, None)]
    while stack:
        node, depth, link = stack.pop()
        if depth > MAX_DEPTH:
            problems.append((path_of(link), f"tables or arrays nested more than {MAX_DEPTH} deep"))
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node)
        later = []
        for k, v in items:
            if isinstance(v, (dict, list)):
                later.append((v, depth + 1, (link, k)))
            elif isinstance(v, float) and not math.isfinite(v):
                problems.append((path_of((link, k)), f"{v} is not a finite number: nan and inf are not allowed in a plan"))
            elif isinstance(v, int) and not isinstance(v, bool) and not INT_MIN <= v <= INT_MAX:
                problems.append((path_of((link, k)), f"{_short(v)} is outside TOML's 64-bit integers (-2^63 to 2^63-1)"))
        stack.extend(reversed(later))
    return problems


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
MAX_MESSAGE = 500  # characters of one message: a huge echoed value still gives a readable line


def _key_path(path: tuple) -> str:
    """``("contrasts", 0, "margin")`` → ``contrasts[0].margin``; odd keys quoted (and cut) as in TOML."""
    out = ""
    for k in path:
        if isinstance(k, int):
            out += f"[{k}]"
            continue
        k = str(k)
        if not _BARE_KEY.fullmatch(k):
            k = json.dumps(k if len(k) <= 40 else k[:39] + "…", ensure_ascii=False)
        out += ("." if out else "") + k
    return out or "(top level)"


def _lines(problems: list[tuple[tuple, str]], source: str, text: str) -> list[str]:
    """``FILE:LINE: key.path: message`` per problem (the key's line, or its nearest table's)."""
    lines = key_lines(text) if text else {}
    out = []
    for path, msg in problems:
        msg = " ".join(msg.split())  # one line, whatever the message echoes
        if len(msg) > MAX_MESSAGE:
            msg = msg[: MAX_MESSAGE - 1] + "…"
        line = line_of(lines, path)
        out.append(f"{source}:{line}: {_key_path(path)}: {msg}" if line else f"{source}: {_key_path(path)}: {msg}")
    return out


def validate_plan(data: dict[str, Any], *, source: str = "plan", text: str = "") -> Plan:
    """Validate parsed TOML ``data``; raise :class:`PlanError` with one line per problem."""
    problems = document_problems(data)  # again here: ``data`` need not come from parse_toml
    if problems:
        raise PlanError(*_lines(problems, source, text))
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        seen: dict[tuple, str] = {}
        for err in e.errors():
            path, msg = _explain(err, data)
            seen.setdefault(path, msg)  # one line per key: a union reports each member
        raise PlanError(*_lines(list(seen.items()), source, text)) from None
    problems = cross_check(plan)
    if problems:
        raise PlanError(*_lines(problems, source, text))
    return plan


def _toml_path(loc: tuple, data: Any, *, missing: bool) -> tuple:
    """The TOML key path in a pydantic error location.

    pydantic mixes union-member and validator tags into locations (``str``, ``list[float]``,
    ``function-after[...]``, ``[key]``); a part is kept when it is a key or index that the data
    has, so a configuration called ``int`` or ``list`` keeps its name.
    """
    out: list = []
    node = data
    for i, x in enumerate(loc):
        if isinstance(node, dict) and isinstance(x, str) and x in node:
            node = node[x]
        elif isinstance(node, list) and type(x) is int and 0 <= x < len(node):
            node = node[x]
        elif not (missing and i == len(loc) - 1 and isinstance(x, str)):  # keep the missing key itself
            continue
        out.append(x)
    return tuple(out)


def _explain(err: dict, data: Any) -> tuple[tuple, str]:
    """A pydantic error as (TOML key path, message in the plan's terms)."""
    kind, msg = err["type"], err["msg"]
    loc = _toml_path(err["loc"], data, missing=kind == "missing")
    if kind == "extra_forbidden":
        return loc, "unknown key" + _near_key(err["loc"])
    if kind == "missing":
        return loc, "required key is missing"
    if kind == "value_error":
        return loc, msg.removeprefix("Value error, ")
    got = err.get("input")
    shown = _short(got) if not isinstance(got, (dict, list)) else type(got).__name__
    return loc, f"{msg[0].lower() + msg[1:]} (got {shown})"


def _near_key(loc: tuple) -> str:
    """``; did you mean 'x'?`` for an unknown key: the closest key of the table it was found in
    (``mixed_device`` → ``mixed_devices``), or nothing when none is close."""
    model: Any = Plan
    for part in loc[:-1]:
        fields = getattr(model, "model_fields", {})
        if isinstance(part, str) and part in fields:
            model = _table_of(fields[part].annotation) or model
    near = difflib.get_close_matches(str(loc[-1]), list(getattr(model, "model_fields", {})), n=1, cutoff=0.75)
    return f"; did you mean {near[0]!r}?" if near else ""


def _table_of(annotation: Any) -> Any:
    """The pydantic model inside an annotation (``Budget | None``, ``list[Contrast]``, ``dict[Name, Configuration]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _table_of(arg)) is not None:
            return found
    return None


def load_plan(path: str | Path) -> PlanFile:
    """Read, parse and validate a plan file (a path to ``plan.toml`` or its study folder)."""
    p = resolve_plan_path(path)
    raw, data = read_toml(p)
    plan = validate_plan(data, source=str(p), text=raw.decode("utf-8"))
    return PlanFile(p, raw, data, plan)


def resolve_plan_path(path: str | Path) -> Path:
    """``STUDY_DIR`` → ``STUDY_DIR/plan.toml``; a file path is returned as is.

    Every command finds its plan here, so a path that leads to no plan is refused here, naming what
    was typed: a folder that does not exist, or one without ``plan.toml`` (before any lock or run is
    looked for, whose absence would only be a consequence).
    """
    p = Path(path)
    if p.is_dir():
        if not (p / PLAN_FILE).exists():
            raise PlanError(f"{path}: no {PLAN_FILE} in this folder (prereg new {path} writes a template)")
        return p / PLAN_FILE
    if not p.exists():
        raise PlanError(f"{path}: no such plan file" if p.suffix == ".toml" else f"{path}: no such folder")
    return p
