"""``prereg dry-run``: what would this plan conclude, and how often, before a single real run?

Writes synthetic run logs for the plan (its configurations × main seeds, its budget and
evaluation schedule, its evaluation sets, chosen true effects, realistic seed and problem
variance; :mod:`prereg_kit.simulate.synth`), locks a copy of the plan beside them, and analyzes them with
the same code as ``prereg analyze``. With ``repeat = N`` it does this N more times on fresh
synthetic data and reports, per contrast, how often each verdict came out: the power of each
primary contrast by simulation (or its false-positive rate when the true effect is zero).

A plan with ``[[sources]]`` reads configurations of other studies, which a dry run cannot take
from their real runs: each source is simulated too, as a study of its own under
``<out>/sources/<name>/``: a copy of its plan file as it is on disk (locked or not: the registry's
paper studies are not locked), locked there, with synthetic runs of the configurations this plan
reads (its seeds, budget and run length; the same problems and seed effects as this plan's own
runs). The copy of this plan names each source by that folder (``sources/<name>``) and is locked
after them, so the analysis opens, pins and verifies them as it would real ones. A source's own
sources are copied and locked the same way, without runs (only their locks are verified).
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pandas as pd
import tomli_w

from ..analysis.analyze import Analysis, analyze_study
from ..analysis.looks import looks_of_differences, looks_power, per_seed_differences
from ..chain.gradient_seal import result_folder, seal_gradient
from ..chain.lock import lock_plan, parse_time
from ..chain.seal import seal_runs
from ..chain.sources import source_folder
from ..errors import PreregError
from ..plan import PLAN_FILE, Plan, load_plan, sourced_names
from ..progress import progress as _progress
from ..report import write_report
from ..runlog.schema import ITERATION_COLUMNS
from .gradient import write_synthetic_result
from .synth import generate_study

MARKER = ".prereg-dry-run"
SOURCES = "sources"  # <out>/sources/<name>/: the simulated studies a plan's [[sources]] name


def configuration_effects(plan: Plan, effects: dict[str, float]) -> dict[str, float]:
    """True accuracy effect at B of each configuration, from effects given per contrast.

    The comparator is 0; a contrast ``C = Δ`` sets treatment = control + Δ (every pair of a
    pooled contrast; the two arms of a Welch contrast). Effects propagate through chains of
    contrasts; configurations no contrast reaches get 0. Contradictory effects are an error, and
    so is an effect on a difference of two differences (give its pairs' effects instead).
    """
    ids = {c.id: c for c in plan.contrasts}
    edges: list[tuple[str, str, str, float]] = []
    for cid, delta in effects.items():
        if cid not in ids:
            raise PreregError(f"--effect {cid}: no such contrast (have: {', '.join(ids)})")
        c = ids[cid]
        if len(c.arm_pairs()) > 1 and c.design != "pooled":
            raise PreregError(f"--effect {cid}: a {c.design} contrast compares two differences; give effects "
                              "on contrasts of its single pairs instead")
        edges += [(cid, t, k, delta) for t, k in c.arm_pairs()]
    known = {plan.study.comparator: 0.0}
    pending = list(edges)
    while pending:
        progressed = False
        for edge in list(pending):
            cid, t, k, delta = edge
            if k in known or t in known:
                val, name = (known[k] + delta, t) if k in known else (known[t] - delta, k)
                if name in known and abs(known[name] - val) > 1e-12:
                    raise PreregError(f"--effect {cid}={delta:g} contradicts the other effects ({name} would be both "
                                      f"{known[name]:+g} and {val:+g})")
                known[name] = val
                pending.remove(edge)
                progressed = True
        if not progressed:  # contrasts not connected to the comparator: anchor at 0
            known[pending[0][2]] = 0.0
    return {name: known.get(name, 0.0) for name in [*plan.configurations, *sourced_names(plan)]}


def check_columns(plan: Plan) -> dict[str, dict[str, float]]:
    """Synthetic per-iteration columns for the plan's manipulation checks that read a column the
    run-log schema does not define: every configuration at 0.5, the checked configuration moved
    the way the check expects (0.1 past its threshold, or onto its target with the reference
    0.2 away), so that a dry run shows what a working manipulation reports."""
    schema = {col.name for col in ITERATION_COLUMNS}
    cols: dict[str, dict[str, float]] = {}
    for k in plan.checks:
        for col in (k.metric, k.baseline):
            if col is not None and col not in schema:
                cols.setdefault(col, {})
        if k.metric in schema:
            continue
        if k.expect == "closer_to_target":
            cols[k.metric][k.configuration] = k.target
            far = k.target - 0.2 if k.target >= 0.5 else k.target + 0.2
            if k.baseline and k.baseline not in schema:
                cols[k.baseline][k.configuration] = far
            elif k.control:
                cols[k.metric][k.control] = far
        else:
            base = 0.5 if (k.control or k.baseline) else 0.0
            cols[k.metric][k.configuration] = base + k.threshold + (0.1 if k.expect == "greater" else -0.1)
    return {c: {n: min(1.0, max(0.0, v)) for n, v in m.items()} for c, m in cols.items()}


@dataclass
class DryRun:
    folder: Path
    analysis: Analysis
    effects: dict[str, float]
    power: pd.DataFrame | None


ITERATION_TOKENS = 16_384  # tokens of one simulated iteration under an iteration budget (8 × 8 × 256)


def _groups(plan, only: list[str] | None = None) -> dict[tuple, list[str]]:
    """The main stage's configurations (``only``: these of them) grouped by what a synthetic
    study is generated with: their budget (axis, B, evaluation interval) and seeds. One group when
    the plan has one budget and one seed list; a configuration with a budget or seeds of its own
    makes a group of its own."""
    out: dict[tuple, list[str]] = {}
    for c in plan.configurations_for("main"):
        if only is not None and c not in only:
            continue
        b = plan.budget_of(c)
        every = b.eval_interval_tokens() if b.tokens is not None else b.eval_interval_iterations()
        out.setdefault((b.axis, b.value, every, tuple(plan.seeds_for("main", c))), []).append(c)
    return out


def _generate(plan_file, folder: Path, effects: dict[str, float], rng: int, *,
              time_ratio: dict[str, float] | None = None, update_ratio: dict[str, float] | None = None,
              only: list[str] | None = None) -> None:
    """Write the synthetic runs of every main-stage configuration × its seeds, each to its own B
    (``only``: of these configurations; a source's, see the module docstring).

    Configurations that share a budget and seeds are generated together (common random numbers
    within a seed); a group of its own otherwise, with the same problems and seed effects (the
    same ``rng``). Under an iteration budget every iteration generates ``ITERATION_TOKENS`` tokens
    with one update, so B is exactly iteration N (``update_ratio`` does not apply there)."""
    plan = plan_file.plan
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("synthetic study written by `prereg dry-run`; safe to delete\n")
    if plan.sources:  # each source simulated as a study of its own, locked before this copy pins it
        data = copy.deepcopy(plan_file.data)
        for i, src in enumerate(plan.sources):
            sub = load_plan(source_folder(plan_file.path.parent, src))
            p = src.prefix
            _generate(sub, folder / SOURCES / p, {c: effects.get(f"{p}/{c}", 0.0) for c in sub.plan.configurations}, rng,
                      time_ratio={c: v for c in sub.plan.configurations if (v := (time_ratio or {}).get(f"{p}/{c}"))},
                      update_ratio={c: v for c in sub.plan.configurations if (v := (update_ratio or {}).get(f"{p}/{c}"))},
                      only=list(src.configurations) if only is None else [])
            data["sources"][i]["study"] = f"{SOURCES}/{p}"
        (folder / PLAN_FILE).write_text(tomli_w.dumps(data), encoding="utf-8")
    else:
        shutil.copyfile(plan_file.path, folder / PLAN_FILE)
    now = parse_time(lock_plan(folder / PLAN_FILE).entry["time"])
    started = 0
    log_length = any((c.metric or plan.evaluation.metric) == "log_length" for c in plan.contrasts)
    for (axis, value, every, seeds), names in _groups(plan, only).items():
        by_tokens = axis == "tokens"
        B = int(value) if by_tokens else int(value) * ITERATION_TOKENS
        # relative costs: seconds per generated token and updates per token (64 updates to B = 1)
        tpt = {c: 1e-4 * (time_ratio or {}).get(c, 1.0) for c in names}
        upt = {c: (64 / B * (update_ratio or {}).get(c, 1.0)) if by_tokens else 1 / ITERATION_TOKENS for c in names}
        generate_study(
            folder, study=plan.study.id, plan_hash=plan_file.content_sha256,
            configurations={c: effects[c] for c in names}, seeds=list(seeds), budget_tokens=B,
            eval_every=every if by_tokens else every * ITERATION_TOKENS,
            eval_sets={s.name: s.n_problems or 200 for s in plan.evaluation.sets if s.every_evaluation},
            budget_sets={s.name: s.n_problems or 200 for s in plan.evaluation.sets if not s.every_evaluation},
            set_levels={s.name: s.levels for s in plan.evaluation.sets if s.levels},
            # a log_length contrast's true effect is the configuration's effect on the log scale
            length_effects=effects if log_length else None,
            samples=plan.evaluation.samples, extend_to={c: plan.train_to(c) for c in names},
            greedy=plan.evaluation.greedy or plan.evaluation.metric == "greedy_accuracy",
            time_per_token=tpt, updates_per_token=upt, rng=rng,
            started_at=now + timedelta(microseconds=1 + started), spacing=timedelta(microseconds=1),
            iteration_columns=check_columns(plan), fixed_iteration_tokens=not by_tokens)
        started += len(names) * len(seeds)
    seal_runs(folder)  # as a trainer seals its runs: the analysis checks every file against its seal
    for t in plan.gradient_tests if only is None else []:  # made-up results marked synthetic, sealed as `prereg gradient-test` seals
        write_synthetic_result(result_folder(folder, t.id), plan, t, plan_file.content_sha256, seed=rng)
        seal_gradient(folder, t.id)


def _fresh_folder(folder: Path) -> None:
    if folder.exists():
        if not (folder / MARKER).exists():
            raise PreregError(f"{folder}: exists and was not written by `prereg dry-run`; choose another --out")
        shutil.rmtree(folder)


def dry_run(plan_path: str | Path, effects: dict[str, float], *, out: str | Path | None = None, repeat: int = 0,
            seed: int = 0, n_resamples: int | None = None, progress: bool | None = None,
            time_ratio: dict[str, float] | None = None, update_ratio: dict[str, float] | None = None) -> DryRun:
    """Generate, lock, analyze and report one synthetic study; with ``repeat`` estimate power.

    ``time_ratio`` / ``update_ratio``: per configuration, training seconds and optimizer updates
    per generated token relative to the others (e.g. a Monte-Carlo reward: fewer updates per
    token, so its time and update readings differ from its token reading).
    """
    pf = load_plan(plan_path)
    names = [*pf.plan.configurations, *sourced_names(pf.plan)]
    for name in {**(time_ratio or {}), **(update_ratio or {})}:
        if name not in names:
            raise PreregError(f"no configuration {name!r} (have: {', '.join(names)})")
    ratios = {"time_ratio": time_ratio, "update_ratio": update_ratio}
    folder = Path(out) if out is not None else pf.path.parent / "dry-run"
    _fresh_folder(folder)
    eff = configuration_effects(pf.plan, effects)
    _note(progress, f"dry run: writing synthetic run logs to {folder}")
    _generate(pf, folder, eff, seed, **ratios)
    _note(progress, "dry run: analyzing them with the plan's statistics")
    analysis = analyze_study(folder, n_resamples=n_resamples, progress=progress, not_read=True)
    analysis.synthetic = True
    analysis.notes.insert(0, "SYNTHETIC DATA from `prereg dry-run` with true effects at B: "
                          + ", ".join(f"{k} {v:+.3f}" for k, v in eff.items()))
    _note(progress, "dry run: writing the report" + (f", then {repeat} more synthetic studies for power" if repeat else ""))
    write_report(analysis, folder / "report")
    power = simulate_power(pf, eff, repeat, seed=seed, progress=progress, **ratios) if repeat else None
    if power is not None:
        power.assign(synthetic=True).to_csv(folder / "report" / "power.csv", index=False)  # as every dry-run table
        if "looks" in power.attrs:
            power.attrs["looks"].assign(synthetic=True).to_csv(folder / "report" / "looks_power.csv", index=False)
    return DryRun(folder, analysis, eff, power)


def _note(progress: bool | None, text: str) -> None:
    """A step of a long dry run on stderr when it is not a terminal (a log shows it moving); a
    terminal gets progress bars instead."""
    import sys

    if progress is None and not sys.stderr.isatty():
        print(text, file=sys.stderr, flush=True)


def simulate_power(pf, effects: dict[str, float], repeat: int, *, seed: int = 0, progress: bool | None = None,
                   n_resamples: int = 200, **ratios) -> pd.DataFrame:
    """Share of ``repeat`` synthetic studies in which each contrast reached each verdict.

    Bootstraps are cut to ``n_resamples`` (they do not enter the verdicts); ``shown`` is the
    share with a gain, a deficit, equivalence or non-inferiority shown — for a primary
    contrast with a true effect, its power.
    """


    verdicts, looks = [], []
    with tempfile.TemporaryDirectory(prefix="prereg-power-") as tmp:
        for i in _progress(list(range(repeat)), progress, "simulating studies"):
            folder = Path(tmp) / f"rep-{i}"
            _generate(pf, folder, effects, seed + 1 + i, **ratios)
            a = analyze_study(folder, n_resamples=n_resamples, progress=False, not_read=True)
            verdicts.append(a.contrasts[["contrast", "tier", "kind", "verdict"]].assign(rep=i))
            if pf.plan.sequential is not None:  # every look of this study, from its per-seed differences
                looks.append(looks_of_differences(per_seed_differences(a.per_seed, pf.plan), pf.plan))
            shutil.rmtree(folder)
    v = pd.concat(verdicts, ignore_index=True)
    v["shown"] = v["verdict"].isin(["gain", "deficit", "equivalent", "non-inferior"])
    counts = v.pivot_table(index=["contrast", "tier", "kind"], columns="verdict", values="rep", aggfunc="count",
                           fill_value=0)
    shares = (counts / repeat).add_prefix("share_").reset_index()
    shown = v.groupby("contrast")["shown"].mean().rename("shown").reset_index()
    out = shares.merge(shown, on="contrast")
    out.insert(3, "repeats", repeat)
    order = {c.id: i for i, c in enumerate(pf.plan.contrasts)}
    out = out.sort_values("contrast", key=lambda s: s.map(order)).reset_index(drop=True)
    if looks:  # a sequential plan: per look, the share that stopped there and the power by then
        out.attrs["looks"] = looks_power(looks, pf.plan)
    return out


def parse_pairs(items: list[str], option: str, example: str) -> dict[str, float]:
    """``["A=0.1", ...]`` → ``{"A": 0.1}``; a malformed item is a one-line error."""
    out = {}
    for item in items:
        name, sep, val = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(val)
        except ValueError:
            raise PreregError(f"{option} {item!r}: expected NAME=NUMBER, e.g. {example}") from None
    return out
