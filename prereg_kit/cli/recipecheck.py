"""The recipe check of ``prereg lock``, ``prereg amend`` and ``prereg verify``: every configuration
of a plan must be settings its trainer knows.

A plan names its trainer in ``[study] trainer`` (default ``"builtin"``; ``"external"`` for runs
made elsewhere and imported: no check). When that trainer is installed (an entry point of group
``prereg_kit.runners``, :mod:`prereg_kit.cli.runners`), its ``check_configuration(plan, name)`` is
asked about every configuration except those marked ``runnable = false``; each line it returns
becomes ``plan.toml:LINE: configurations.X.overrides.credit.mc_kk: unknown key; did you mean
'credit.mc_k'?`` (or ``recipe.<key>`` when the key is in the shared ``[recipe]``), the line being
where the plan writes the key (flat, dotted or in a sub-table). A runner with ``recipe_keys()``
(every valid dotted key) gives the closest valid name; the suggestion is made here, with difflib.

The trainer is reached only through its entry point: the core never imports it.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import PlanError, PreregError
from ..plan import MAX_MESSAGE, Plan, PlanFile
from ..plan.gradient import with_variants
from ..plan.tomlpos import key_lines, line_of
from .runners import installed_runners, load_runner

EXTERNAL = "external"  # runs come from another trainer and are imported: nothing to check
BUILTIN = "builtin"

# Trainers that train outside prereg-kit, by the name a plan gives in ``[study] trainer``: how
# their runs come in, and what is checked of them there (``prereg lock`` says both, and what
# the plan leaves to the trainer's own settings).
OUTSIDE: dict[str, tuple[str, str]] = {
    "verl": ("`prereg import verl`",
             "the run's configuration and seed are planned ones, it started after the lock, its generated tokens, "
             "stage seconds and updates come from verl's own log (dynamic sampling refused), and its validation "
             "outputs are re-scored with the plan's verifiers"),
    "openrlhf": ("`prereg import openrlhf`",
                 "the run's configuration and seed are planned ones, it started after the lock, its generated tokens, "
                 "step seconds and updates come from OpenRLHF's logged metrics (dynamic filtering refused), and its "
                 "evaluation outputs are re-scored with the plan's verifiers"),
    "trl": ("PreregCallback in TRL's GRPOTrainer (or `prereg import trl`)",
            "PreregCallback stops a run whose TRL settings differ from the configuration's recipe (group size, "
            "completion limit, temperature, top-p, learning rate and its schedule, prompts per batch), counts the "
            "generated tokens itself and runs the plan's evaluations"),
    EXTERNAL: ("`prereg import <tool>`",
               "the run's configuration and seed are planned ones, it started after the lock, its compute comes from "
               "the tool's logs, and evaluation outputs are re-scored with the plan's verifiers"),
}


def outside_note(name: str, checked_recipe: bool) -> str:
    """What ``prereg lock`` says of a plan whose runs a trainer outside prereg-kit makes."""
    how, checked = OUTSIDE[name]
    tool = "the trainer" if name == EXTERNAL else name
    left = ("the settings TRL has beyond those" if name == "trl"
            else f"the recipe's settings ([recipe] and overrides) are what {tool}'s own configuration sets: each run "
                 "keeps that configuration (meta.config), which is not compared with the plan")
    recipe = " and its recipe keys against the built-in trainer's settings, which PreregCallback reads" if checked_recipe else ""
    return (f"trainer {name!r} trains outside prereg-kit; its runs come in through {how}. Checked now: the plan "
            f"(configurations, seeds, budget, evaluations, contrasts){recipe}. Checked as runs come in: {checked}. "
            f"Left to {tool}: {left}")
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_MAX_SUGGEST = 200  # characters of a key worth comparing with the valid names (a huge key has no near miss)
_MAX_SHOWN = 60  # characters of a key echoed in a message


@dataclass
class RecipeCheck:
    """What the check found: one line per problem (empty: every checked configuration is valid), and
    a note when the recipe was not checked at all (empty when it was)."""

    problems: list[str] = field(default_factory=list)
    note: str = ""

    def raise_problems(self) -> None:
        if self.problems:
            raise PlanError(*self.problems)


def check_recipes(pf: PlanFile) -> RecipeCheck:
    """Check every runnable configuration of ``pf`` with the plan's trainer, if it is installed."""
    name = getattr(pf.plan.study, "trainer", BUILTIN)
    found = installed_runners()
    if name in OUTSIDE and name not in found:
        if name == "trl" and BUILTIN in found:  # PreregCallback reads the recipe as the built-in trainer's settings
            res = _check_with(pf, BUILTIN, found)
            if not res.note:
                return RecipeCheck(problems=res.problems, note=outside_note(name, checked_recipe=True))
        return RecipeCheck(note=outside_note(name, checked_recipe=False))
    return _check_with(pf, name, found)


def _check_with(pf: PlanFile, name: str, found) -> RecipeCheck:
    if name not in found:
        return RecipeCheck(note=f"recipe not checked: trainer {name!r} is not installed")
    try:
        runner = load_runner(name, command="lock", found=found)
    except PreregError as e:
        return RecipeCheck(note=f"recipe not checked: trainer {name!r} could not be loaded ({e.lines[0]})")
    if getattr(runner, "check_configuration", None) is None:
        return RecipeCheck(note=f"recipe not checked: trainer {name!r} does not say which recipes it can run")
    keys = getattr(runner, "recipe_keys", None)
    valid = sorted(set(keys())) if keys is not None else None
    return RecipeCheck(problems=recipe_problems(pf, runner, valid))


def gate(notes: list[str]):
    """A ``check`` for :func:`prereg_kit.chain.lock.lock_plan` and friends: refuses a plan with recipe
    problems; a note that the recipe was not checked is appended to ``notes``."""

    def check(pf: PlanFile) -> None:
        res = check_recipes(pf)
        if res.note:
            notes.append(res.note)
        res.raise_problems()

    return check


def recipe_problems(pf: PlanFile, runner: Any, valid: list[str] | None) -> list[str]:
    """The runner's lines for every configuration not marked ``runnable = false``, each placed at
    the line of the key it names; identical lines (a ``[recipe]`` key seen by several
    configurations) are given once."""
    plan, text = pf.plan, pf.raw.decode("utf-8")
    lines = key_lines(text)
    out: dict[str, int] = {}  # line -> its place in the file, for file order
    for name, conf in plan.configurations.items():
        if getattr(conf, "runnable", True) is False:
            continue
        for line in runner.check_configuration(plan, name):
            placed, at = _place(str(line), plan, name, lines, valid, source=str(pf.path))
            out.setdefault(placed, at or 0)
    for ti, t in enumerate(getattr(plan, "gradient_tests", ())):  # a gradient test's variants are recipes the trainer must run too
        for name in t.variants:
            for line in runner.check_configuration(with_variants(plan, t), name):
                rest = " ".join(str(line).split()).removeprefix("recipe: ").removeprefix(f"configuration {name!r}: ")
                at = line_of(lines, ("gradient_tests", ti)) or line_of(lines, ("gradient_tests",))
                where = f"gradient_tests[{ti}].variants.{name}"
                out.setdefault(f"{pf.path}:{at}: {where}: {rest}" if at else f"{pf.path}: {where}: {rest}", at or 0)
    return sorted(out, key=out.__getitem__)


def _place(line: str, plan: Plan, name: str, lines: dict[tuple, int], valid: list[str] | None,
           *, source: str) -> tuple[str, int | None]:
    """One runner line as ``FILE:LINE: where.key: message[; did you mean 'x'?]``, and the LINE."""
    line = " ".join(line.split())
    rest = line.removeprefix("recipe: ").removeprefix(f"configuration {name!r}: ").removeprefix("(recipe): ")
    over = plan.configurations[name].overrides
    key = _key_at_start(rest, [*_paths(over), *_paths(plan.recipe)])
    if key is None:  # a rule across keys, or a default: the configuration's own line
        path: tuple = ("configurations", name)
        msg = rest
    else:
        msg = rest[len(".".join(key)):].removeprefix(":").strip()
        path = (("configurations", name, "overrides") if _has(over, key) else ("recipe",)) + key
    if msg.startswith("unknown key") and key is not None:
        if "did you mean" not in msg:
            msg += _hint(".".join(key), valid)
        elif not ".".join(key).isascii():  # the runner's own suggestion stands; a look-alike letter is still shown
            head, sep, tail = msg.partition("; did you mean")
            msg = head + f" (not plain ASCII: {_cut(json.dumps('.'.join(key)))})" + sep + tail
    if len(msg) > MAX_MESSAGE:
        msg = msg[: MAX_MESSAGE - 1] + "…"
    shown = _shown(path)
    at = line_of(lines, path) or line_of(lines, ("configurations", name))
    return (f"{source}:{at}: {shown}: {msg}" if at else f"{source}: {shown}: {msg}"), at


def _paths(table: dict, prefix: tuple = ()) -> Iterable[tuple]:
    """Every key path of a (nested) table, tables included."""
    for k, v in table.items():
        yield prefix + (str(k),)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (str(k),))


def _has(table: dict, path: tuple) -> bool:
    node: Any = table
    for k in path:
        if not isinstance(node, dict) or k not in node:
            return False
        node = node[k]
    return True


def _key_at_start(text: str, paths: list[tuple]) -> tuple | None:
    """The longest key path the runner's message starts with (``credit.mc_kk: unknown key``); keys
    are matched against the plan's own, so a key holding ``": "`` is still found whole."""
    best = None
    for p in paths:
        dotted = ".".join(p)
        if text.startswith(dotted + ":") and (best is None or len(p) > len(best)):
            best = p
    return best


def _hint(key: str, valid: list[str] | None) -> str:
    """``; did you mean 'credit.mc_k'?``: the same key name in another section first (a flat alias
    written in the wrong section), else the closest valid name, a flat alias named by its sectioned
    place; a key that is not plain ASCII is shown escaped, since a look-alike letter is otherwise
    invisible."""
    escaped = "" if key.isascii() else f" (not plain ASCII: {_cut(json.dumps(key))})"
    if not valid or len(key) > _MAX_SUGGEST:
        return escaped
    tail = key.rsplit(".", 1)[-1]
    same = [v for v in valid if "." in v and v.rsplit(".", 1)[-1] == tail and v != key]
    near = same or difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if near and "." not in near[0]:  # a flat alias: name its sectioned place, the words plans now use
        near = [v for v in valid if v.rsplit(".", 1)[-1] == near[0] and "." in v][:1] or near
    return escaped + (f"; did you mean {near[0]!r}?" if near else "")


def _cut(s: str) -> str:
    return s if len(s) <= _MAX_SHOWN else s[: _MAX_SHOWN - 1] + "…"


def _shown(path: tuple) -> str:
    """A key path as the plan writes it: odd keys quoted, long ones cut."""
    return ".".join(_cut(p if _BARE.fullmatch(p) else json.dumps(p, ensure_ascii=False)) for p in map(str, path))
