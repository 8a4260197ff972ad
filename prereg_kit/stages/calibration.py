"""The calibration stage's rules: the token budget B and the completion limit (dense-rewards paper
§C.1 "Implementation"; the Llama calibrations of S24 and S27, §C.5.3 and §C.5.4).

* **Budget rule** (§C.1 "Implementation"): "48 times the mean number of tokens per iteration that the k = 4
  Monte-Carlo reward generates over iterations 0–2 of one calibration run, rounded up to a
  multiple of 250,000", applied "for each model and task before the studies". Tokens are every
  kind B counts (rollouts, continuations, discarded groups). :func:`calibrated_budget`.
* **Truncation rule** ("the S1 rules", §C.1 "Implementation", §C.5.3): the share of the base model's
  samples cut off at 380 tokens decides whether the limit becomes 768 (Llama-3.2-3B: 33% → 768;
  Llama-3.2-1B: 37.5% → 768). The paper does not state the threshold; the
  default here, :data:`TRUNCATION_SHARE` = 0.25, is our choice: every threshold in (0, 0.33]
  reproduces both calibrations the paper reports. The rule applies to a 380-token limit only.
  (Qwen2.5-1.5B, calibrated before the rule existed, stayed at 380 with 73% cut off, App. A "Recipe".)
  :func:`truncation_limit`.

:func:`apply_calibration` reads the complete runs of ``<study>/stages/calibration/`` (the trainer
stops them after iterations 0–2), measures tokens per iteration and the base model's truncation
share (iteration 0), and writes the result into the plan — the completion limit when the rule
raises it (B measured at 380 would then be wrong: the stage's runs are moved aside and the stage
must run again at 768), else B — as a dated amendment of a locked plan (``prereg_kit.chain.lock``), or
into the plan alone while it is not yet locked. Nothing is written silently: every change is
printed and, once locked, chained with its reason.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

from ..chain.lock import amend_plan, lock_path
from ..errors import PreregError, writing
from ..plan import load_plan, parse_tokens
from ..plan.tomlpos import key_lines
from ..runlog import read_run, run_dir

CALIBRATION_ITERATIONS = 3  # iterations 0-2
BUDGET_MULTIPLE = 48
BUDGET_ROUNDING = 250_000
TRUNCATION_FROM, TRUNCATION_TO = 380, 768
TRUNCATION_SHARE = 0.25  # not stated in the paper (module docstring)
ARCHIVE = "calibration-at-{limit}"  # where a superseded calibration's runs are kept, beside stages/


def calibrated_budget(tokens_per_iteration: int | float | Fraction) -> int:
    """B = 48 × tokens per iteration, rounded up to a multiple of 250,000 (exact arithmetic: a
    mean given as a Fraction, e.g. ``Fraction(sum, count)``, is never rounded before the ceiling)."""
    if isinstance(tokens_per_iteration, bool) or not isinstance(tokens_per_iteration, (int, float, Fraction)):
        raise ValueError(f"tokens per iteration must be a number, got {tokens_per_iteration!r}")
    if isinstance(tokens_per_iteration, float) and not math.isfinite(tokens_per_iteration):
        raise ValueError(f"tokens per iteration must be finite, got {tokens_per_iteration}")
    t = Fraction(str(tokens_per_iteration)) if isinstance(tokens_per_iteration, float) else Fraction(tokens_per_iteration)
    if t <= 0:
        raise ValueError(f"tokens per iteration must be positive, got {tokens_per_iteration}")
    return math.ceil(BUDGET_MULTIPLE * t / BUDGET_ROUNDING) * BUDGET_ROUNDING


def truncation_limit(shares: Sequence[float], limit: int = TRUNCATION_FROM, *,
                     threshold: float = TRUNCATION_SHARE) -> int:
    """The completion limit after the truncation rule: 768 when ``limit`` is 380 and the mean of
    ``shares`` (the base model's share of samples cut off at the limit, one value per calibration
    run, each from the same number of samples) is at least ``threshold``; else ``limit``."""
    if not len(shares):
        raise ValueError("no truncation shares: the rule needs the base model's samples")
    for s in shares:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 <= s <= 1:  # NaN fails too
            raise ValueError(f"a truncation share is a fraction in [0, 1], got {s!r}")
    if not 0 < threshold <= 1:
        raise ValueError(f"the threshold is a fraction in (0, 1], got {threshold!r}")
    if limit != TRUNCATION_FROM:
        return limit
    return TRUNCATION_TO if math.fsum(shares) / len(shares) >= threshold else limit


@dataclass
class Calibration:
    """What the calibration stage measured and what it changed."""

    runs: list[str]
    tokens_per_iteration: dict[str, Fraction]  # per configuration, iterations 0-2 pooled over its runs
    limit: int
    shares: list[float]
    budget: int | None = None  # None: not measured here (the limit was raised)
    new_limit: int | None = None
    threshold: float = TRUNCATION_SHARE
    changes: list[str] = field(default_factory=list)
    amendment: str = ""
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"calibration: {len(self.runs)} run(s), iterations 0-{CALIBRATION_ITERATIONS - 1}"]
        out += [f"  {c}: {float(t):,.1f} tokens per iteration" for c, t in self.tokens_per_iteration.items()]
        if self.shares:
            out.append(f"  truncated at {self.limit} tokens (base model, iteration 0): "
                       f"{math.fsum(self.shares) / len(self.shares):.1%}")
        if self.new_limit is not None:
            out.append(f"  truncation rule: {self.limit} → {self.new_limit} tokens (share ≥ {self.threshold:.0%})")
        elif self.shares and self.limit == TRUNCATION_FROM:
            out.append(f"  truncation rule: share below {self.threshold:.0%}, the limit stays {self.limit}")
        if self.budget is not None:
            densest = max(self.tokens_per_iteration, key=self.tokens_per_iteration.get)
            out.append(f"  budget rule: B = {BUDGET_MULTIPLE} × {float(self.tokens_per_iteration[densest]):,.1f} "
                       f"({densest}) rounded up to {BUDGET_ROUNDING:,} = {self.budget:,}")
        return out + [f"  {c}" for c in self.changes] + self.notes + ([self.amendment] if self.amendment else [])


def measure(study_dir: str | Path) -> Calibration:
    """Tokens per iteration and truncation shares of the calibration stage's complete runs."""
    pf = load_plan(study_dir)
    study = pf.path.parent
    per: dict[str, list[int]] = {}
    shares, limits, names = [], set(), []
    for cfg in pf.plan.configurations_for("calibration"):
        for seed in pf.plan.seeds_for("calibration"):
            folder = run_dir(study, cfg, seed, stage="calibration")
            if not (folder / "meta.json").is_file():
                continue
            log = read_run(folder, strict=True)  # a torn or inconsistent log is refused, never used
            it = log.iterations
            rows = it[it["iteration"] < CALIBRATION_ITERATIONS] if len(it) else it
            if log.meta.status != "complete" or len(rows) < CALIBRATION_ITERATIONS:
                raise PreregError(f"{folder}: a calibration run needs iterations 0-{CALIBRATION_ITERATIONS - 1} "
                                  f"complete; it has {len(rows)} ({log.meta.status}); a run that reached the "
                                  "stage's train_to x B first needs a larger train_to on the calibration stage")
            per.setdefault(cfg, []).extend(int(t) for t in rows["tokens_total"])
            first = rows[rows["iteration"] == 0]
            if "truncation_rate" in first and first["truncation_rate"].notna().all() and len(first):
                shares.append(float(first["truncation_rate"].iloc[0]))
            limits.add(_limit_of(log.meta.config, folder))
            names.append(f"{cfg}/seed-{seed}")
    if not per:
        raise PreregError(f"{study}: no calibration runs under stages/calibration/ (prereg run {study} --stage calibration)")
    if len(limits - {None}) > 1:
        raise PreregError(f"{study}: the calibration runs used different completion limits {sorted(limits - {None})}")
    limit = next(iter(limits - {None}), None)
    if limit is None:
        raise PreregError(f"{study}: the calibration runs do not record rollout.completion_limit in meta.json")
    tpi = {c: Fraction(sum(v), len(v)) for c, v in per.items()}
    return Calibration(names, tpi, limit, shares)


def _limit_of(config: dict[str, Any], folder: Path) -> int | None:
    value = (config.get("rollout") or {}).get("completion_limit", config.get("completion_limit"))
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def apply_calibration(study_dir: str | Path, *, threshold: float = TRUNCATION_SHARE) -> Calibration:
    """Measure, apply both rules, write the plan and amend its lock (module docstring)."""
    cal = measure(study_dir)
    cal.threshold = threshold
    pf = load_plan(study_dir)
    study = pf.path.parent
    new_limit = truncation_limit(cal.shares, cal.limit, threshold=threshold) if cal.shares else cal.limit
    if not cal.shares:
        cal.notes.append("  truncation rule not applied: the runs log no truncation_rate")
    text = pf.path.read_text(encoding="utf-8")
    if new_limit != cal.limit:
        cal.new_limit = new_limit
        text = _set_limit(text, pf.plan, new_limit, pf.path)
        cal.changes.append(f"completion limit: {cal.limit} → {new_limit}")
    else:
        try:
            cal.budget = calibrated_budget(max(cal.tokens_per_iteration.values()))
        except ValueError as e:  # e.g. runs that generated nothing
            raise PreregError(f"{study}: calibration runs {', '.join(cal.runs)}: {e}") from None
        text, old = _set_value(text, ("budget", "tokens"), f'"{_tokens_text(cal.budget)}"', pf.path)
        if parse_tokens(old) != cal.budget:
            cal.changes.append(f"[budget] tokens: {old} → \"{_tokens_text(cal.budget)}\"")
    if not cal.changes:
        cal.notes.append(f"{pf.path}: already holds the calibrated values; nothing to amend")
        return cal
    dst = study / ARCHIVE.format(limit=cal.limit)
    if new_limit != cal.limit and dst.exists():
        raise PreregError(f"{dst}: exists; move it aside, then run the calibration again")
    _check_rewrite(text, pf.path)
    tmp = pf.path.with_name(pf.path.name + ".tmp")  # the plan whole or as it was, even on a full disk
    with writing(pf.path, f"{pf.path.name} is as it was"):
        try:
            tmp.write_text(text, encoding="utf-8")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(pf.path)
    if new_limit != cal.limit:  # the B measured at the old limit is void: keep those runs, out of the stage
        for name in cal.runs:  # only the measured runs: other calibration-stage runs (election probes) stay
            src = study / "stages" / "calibration" / name
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            src.rename(dst / name)
        cal.notes.append(f"  the runs at {cal.limit} tokens moved to {dst}; run `prereg run {study} --stage calibration` "
                         f"again to measure B at {new_limit} tokens")
    reason = "calibration stage (" + ", ".join(cal.runs) + "): " + "; ".join(
        [ln.strip() for ln in cal.lines()[1:] if not ln.strip().startswith(("completion limit:", "[budget]"))]
        + cal.changes)
    if lock_path(pf.path).is_file():
        res = amend_plan(pf.path, reason)
        cal.amendment = f"amendment {res.entry['index']} recorded at {res.entry['time']} → {res.path}"
    else:
        cal.amendment = f"{pf.path}: written (the plan is not locked yet: `prereg lock` fixes these values)"
    return cal


def _tokens_text(n: int) -> str:
    text = f"{n / 1_000_000:.2f}".rstrip("0").rstrip(".") + "M"
    return text if parse_tokens(text) == n else str(n)


_ASSIGN = re.compile(r"^(\s*[^=]+?=\s*)(.*?)(\s*(?:#.*)?)$")


def _set_value(text: str, path: tuple, literal: str, where: Path) -> tuple[str, Any]:
    """Replace the value of a one-line ``key = value`` at ``path`` (comments kept); returns the new
    text and the old value as TOML read it."""
    line = key_lines(text).get(path)
    if line is None:
        raise PreregError(f"{where}: no key {'.'.join(map(str, path))} to write the calibrated value into")
    lines = text.split("\n")
    m = _ASSIGN.match(lines[line - 1])
    if m is None:
        raise PreregError(f"{where}:{line}: {'.'.join(map(str, path))}: not a one-line value")
    old = tomllib.loads(f"v = {m.group(2)}")["v"]
    lines[line - 1] = m.group(1) + literal + m.group(3)
    return "\n".join(lines), old


def _set_limit(text: str, plan: Any, limit: int, where: Path) -> str:
    """Write the completion limit where the recipe sets it (sectioned or flat key)."""
    over = [n for n, c in plan.configurations.items() if _mentions(c.overrides, "completion_limit")]
    if over:
        raise PreregError(f"{where}: configurations {', '.join(over)} override completion_limit; "
                          "the calibrated limit is the recipe's: edit them by hand and amend")
    lines = key_lines(text)
    for path in (("recipe", "rollout", "completion_limit"), ("recipe", "completion_limit")):
        if path in lines:
            return _set_value(text, path, str(limit), where)[0]
    header = lines.get(("recipe", "rollout"))
    rows = text.split("\n")
    if header is not None:
        rows.insert(header, f"completion_limit = {limit}  # calibration: truncation rule")
    elif ("recipe",) in lines:
        rows.insert(lines[("recipe",)], f"rollout.completion_limit = {limit}  # calibration: truncation rule")
    else:
        raise PreregError(f"{where}: no [recipe] table to write the calibrated completion limit into")
    return "\n".join(rows)


def _mentions(table: Any, key: str) -> bool:
    if isinstance(table, dict):
        return any(k == key or k.endswith("." + key) or _mentions(v, key) for k, v in table.items())
    return False


def _check_rewrite(text: str, where: Path) -> None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:  # never leave a plan that no longer parses
        raise PreregError(f"{where}: the calibrated plan would not parse ({e}); nothing written") from None
