"""The study report: ``report.md``, ``report.html``, ``results.json``, ``contrasts.csv``,
``contrasts.tex``, ``per_seed.csv`` and figures.

The contrast table follows the layout of the dense-rewards paper's Tables 3–4: method, configuration pair, n,
Δ [95% CI], and the test (Holm p for primary contrasts, p for secondary ones, † for exploratory
ones, TOST p beside them). The columns of ``contrasts.csv`` are documented in
``docs/analysis.md``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..analysis.robustness import MARK, flag_lines, json_lists, robustness_table
from ..errors import writing
from ..plan import COLLAPSE_K, format_tokens
from . import plots
from .extrapolation_plots import extrapolation_figures, extrapolation_notes
from .figures import is_target, report_figures
from .gradient import gradient_markdown, write_gradient
from .html import write_html
from .tex import contrasts_tex

if TYPE_CHECKING:
    from ..analysis.analyze import Analysis


_METHOD_WORDS = {"holm": "Holm-adjusted", "hochberg": "Hochberg-adjusted", "hommel": "Hommel-adjusted",
                 "bh": "Benjamini–Hochberg-adjusted", "bonferroni": "Bonferroni-adjusted"}


def _adjusted_words(plan) -> str:
    """How the families' p are adjusted, in words (the plan's ``method`` of each family)."""
    methods = sorted({f.method for f in plan.families}) or ["holm"]
    return " / ".join(_METHOD_WORDS.get(m, m) for m in methods)


def format_p(p: float) -> str:
    """Paper style: ``.016``, ``2e-04``; ``<1e-10`` below that; ``n/a`` for NaN."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    if p < 1e-10:
        return "<1e-10"
    if p < 0.001:
        return f"{p:.0e}"
    return f"{p:.3f}".lstrip("0") if p < 1 else "1.00"


def _signed(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:+.3f}"


TIME_UNITS = (("s", 1.0), ("min", 60.0), ("h", 3600.0))


def column_time_unit(seconds) -> tuple[str, float]:
    """The unit a column of durations reads in (``s`` below 2 minutes, ``min`` below 2 hours,
    else ``h``) and its length in seconds, chosen from the column's largest value."""
    finite = [float(x) for x in seconds if x is not None and math.isfinite(float(x))]
    top = max(finite, default=0.0)
    return TIME_UNITS[0] if top < 120 else TIME_UNITS[1] if top < 7200 else TIME_UNITS[2]


def cannot_change(plan, configuration: str) -> str | None:
    """Why a configuration's policy cannot change during training, or None: a learning rate of 0
    in its resolved recipe (the flat ``learning_rate`` or ``[update] learning_rate``)."""
    try:
        cfg = plan.resolved_config(configuration)
    except KeyError:
        return None
    update = cfg.get("update")
    for lr in (cfg.get("learning_rate"), update.get("learning_rate") if isinstance(update, dict) else None):
        if isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr == 0:
            return "learning rate 0"
    return None


SYNTHETIC_CAPTION = "*SYNTHETIC: simulated runs from `prereg dry-run`, not results.*"


def synthetic_markdown(text: str) -> str:
    """A dry-run report's markdown: the title begins "SYNTHETIC —" with a banner under it, every
    table has a caption line saying SYNTHETIC, and nothing is bold (no verdict reads as a finding)."""
    lines = text.replace("**", "").splitlines()
    out = []
    for i, line in enumerate(lines):
        if i == 0 and line.startswith("# "):
            out += [f"# SYNTHETIC — {line[2:]}", "",
                    "> **SYNTHETIC.** Every number, verdict and figure below comes from runs simulated by "
                    "`prereg dry-run` with chosen true effects. It shows what the plan would report; it is not a result."]
            continue
        if line.startswith("|") and not (out and out[-1].startswith("|")):
            out += [SYNTHETIC_CAPTION, ""]
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def _share(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else "n.r." if math.isinf(x) else f"{x:.2f}"


ADJUSTMENT_LABEL = {"holm": "Holm", "hochberg": "Hochberg", "hommel": "Hommel", "bh": "BH", "bonferroni": "Bonferroni"}


def printed_test(row: pd.Series) -> str:
    """The 'test' column: what the paper prints beside each contrast."""
    parts = []
    if is_target(row):
        return f"resamples without a saving: {row['boot_p']:.1%}"
    adj = ADJUSTMENT_LABEL.get(row.get("adjustment") or "holm", "Holm")
    test = row.get("test") if isinstance(row.get("test"), str) and row.get("test") != "t" else ""
    if test or row["kind"] == "minimal-effect":  # the plan named another test, or a minimal effect
        what = f"{test} " if test else ""
        what += {"superiority": "", "equivalence": "TOST ", "non-inferiority": "NI "}.get(row["kind"], "MET ")
        primary = row["tier"] == "primary"
        parts.append(f"{adj + ' ' if primary else ''}{what}p = {format_p(row['p_adjusted'] if primary else row['tested_p'])}")
        return "; ".join(parts)
    if row["kind"] == "superiority":
        label = f"{adj} p" if row["tier"] == "primary" and not row.get("exploratory_label", False) else "p"
        parts.append(f"{label} = {format_p(row['p_adjusted'] if label != 'p' else row['p'])}")
        parts.append(f"TOST p = {format_p(row['tost_p'])}")
    elif row["kind"] == "equivalence":
        label = f"{adj} TOST p" if row["tier"] == "primary" else "TOST p"
        parts.append(f"{label} = {format_p(row['p_adjusted'] if row['tier'] == 'primary' else row['tost_p'])}")
    else:
        label = f"{adj} NI p" if row["tier"] == "primary" else "NI p"
        parts.append(f"{label} = {format_p(row['p_adjusted'] if row['tier'] == 'primary' else row['ni_p'])}")
        # non-inferiority is against the lower margin (an asymmetric [-0.01, 0.03] reads -0.01)
        parts.append(f"90% lower bound {_signed(row['ni_lower'])} vs {row['margin_low']:g}".replace("-", "−"))
    return "; ".join(parts)


def metric_label(row) -> str:
    """The metric a contrast reads, as the table prints it: ``accuracy``, ``pass@4``,
    ``negative_rate``, ``collapse``, ``relative_accuracy (÷ primary_only)``; the strict verifier
    is named (``accuracy, strict``)."""
    metric = str(row.get("metric", "accuracy") or "accuracy")
    ref = row.get("reference", "")
    label = f"{metric} (÷ {ref})" if metric == "relative_accuracy" and isinstance(ref, str) and ref else metric
    levels = row.get("levels", "")
    if isinstance(levels, str) and levels:
        label += f", level {levels}"
    if is_target(row):
        label = f"share to reach {row['target']:.3f} ({label})"
    return label + (", strict" if row.get("verifier") == "strict" else "")


def contrast_table(df: pd.DataFrame) -> str:
    """Markdown table of every contrast, in the paper's Table 3–4 layout. A ``metric`` column
    (:func:`metric_label`) is added when some contrast reads another metric than accuracy, and a
    ``design`` column when some contrast is not seed-paired (a Welch row's n is ``n₁ + n₂``)."""
    show_metric = "metric" in df.columns and any(metric_label(r) != "accuracy" for _, r in df.iterrows())
    show_design = "design" in df.columns and any((d or "paired") != "paired" for d in df["design"])
    head = ("| contrast | tier | " + ("design | " if show_design else "") + "configuration pair | "
            + ("metric | " if show_metric else "")
            + "read at | n | Δ [95% CI] | crossed bootstrap 95% CI | test | lower / higher seeds | verdict |")
    lines = [head, "|" + "---|" * (10 + show_design + show_metric)]
    for _, r in df.iterrows():
        dagger = " †" if r["tier"] == "exploratory" else ""
        crossed = ("—" if pd.isna(r.get("crossed_ci_low")) else
                   f"[{_signed(r['crossed_ci_low'])}, {_signed(r['crossed_ci_high'])}]")
        metric = f"{metric_label(r)} | " if show_metric else ""
        design = r.get("design", "paired") or "paired"
        shown = f"{design} | " if show_design else ""
        pair = r.get("comparison") or f"{r['treatment']} − {r['control']}"
        n = f"{int(r['n_treatment'])} + {int(r['n_control'])}" if design == "welch" else f"{r['n']}"
        seeds = "—" if pd.isna(r["n_lower"]) else f"{r['n_lower']} / {r['n_higher']}"
        if r.get("status") == "not read":  # the dry run could not give it: say why instead of numbers
            why = str(r["verdict_reason"]).replace("|", "\\|")
            lines.append(f"| {r['contrast']}{dagger} | {r['tier']} | {shown}{pair} | {metric}{r['at']} "
                         f"| — | not read: {why} | — | — | — | **not read** |")
            continue
        if is_target(r):  # a share of the budget (1 = no saving; n.r. = not reached), no paired-t
            lines.append(f"| {r['contrast']}{dagger} | {r['tier']} | {shown}{pair} | {metric}{r['at']} "
                         f"| {r['n']} | {_share(r['mean'])} [{_share(r['ci_low'])}, {_share(r['ci_high'])}] | — "
                         f"| {printed_test(r)} | {seeds} | **{r['verdict']}** |")
            continue
        at = f"{r['at']} ({r['extrapolation']})" if isinstance(r.get("extrapolation"), str) else r["at"]
        mark = f" {MARK}" if isinstance(r.get("verdict_changes_under"), str) and r["verdict_changes_under"] else ""
        lines.append(
            f"| {r['contrast']}{dagger} | {r['tier']} | {shown}{pair} | {metric}{at} | {n} "
            f"| {_signed(r['mean'])} [{_signed(r['ci_low'])}, {_signed(r['ci_high'])}] | {crossed} "
            f"| {printed_test(r)} | {seeds} | **{r['verdict']}**{mark} |")
    return "\n".join(lines)


def check_table(df: pd.DataFrame) -> str:
    """Markdown table of the manipulation checks: what was read, the per-seed mean of the tested
    quantity with its one-sided bound, p, and PASS / FAIL."""
    lines = ["| check | configuration | metric (reference) | expect | at | n | mean [one-sided 95% bound] | p | result |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in df.itertuples():
        bound = r.ci_low if r.expect != "less" else r.ci_high
        target = f" {r.target:g}" if r.expect == "closer_to_target" else f" than {r.threshold:g}"
        lines.append(f"| {r.check} | {r.configuration} | {r.metric} ({r.reference}) | {r.expect}{target} | {r.at} | {r.n} "
                     f"| {_signed(r.mean)} [{_signed(bound)}] | {format_p(r.p)} | **{r.verdict.upper()}** |")
    return "\n".join(lines)


def verdict_summary(a: Analysis) -> list[str]:
    """One line per contrast tier with its verdicts, and the checks that failed (named)."""
    out = []
    for tier in ("primary", "secondary", "exploratory"):
        rows = a.contrasts[a.contrasts["tier"] == tier]
        if len(rows):
            out.append(f"- {tier}: " + "; ".join(f"{r.contrast} **{r.verdict}**" for r in rows.itertuples()))
    if a.gradient is not None and len(a.gradient.conditions):
        out.append("- gradient-test conditions: " + "; ".join(f"{c.test} {c.text} **{c.verdict}**" for c in a.gradient.conditions.itertuples()))
    if len(a.checks):
        failed = a.checks.loc[~a.checks["passed"].astype(bool), "check"].tolist()
        out.append(f"- manipulation checks: {len(a.checks) - len(failed)} of {len(a.checks)} passed"
                   + (f"; **FAILED: {', '.join(failed)}** (the contrasts these checks support may not test "
                      "the intended manipulation)" if failed else ""))
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(x) else float(x)  # a one-sided bound's open end is null
    if x is pd.NA:
        return None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, pd.Timestamp):
        return x.isoformat()
    return x


TARGET_SHARES = ("mean", "ci_low", "ci_high")  # a to-target row's share of B; inf = the target not reached


def _records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON objects: an infinite share of a to-target row is "n.r." (not reached); any
    other non-finite number (a one-sided bound's open end) is null."""
    out = []
    for r in df.to_dict(orient="records"):
        target = is_target(r)
        out.append({k: "n.r." if target and k in TARGET_SHARES and isinstance(v, (float, np.floating)) and math.isinf(v)
                    else _jsonable(v) for k, v in r.items()})
    return out


def sequential_section(a: Analysis) -> list[str]:
    """The "Sequential looks" section: every look recorded so far and the one read now (look, seeds,
    boundary on its scale, nominal p, spent α, statistic, decision)."""
    sq = a.sequential
    if sq is None:
        return []
    seq = a.plan.sequential
    out = ["## Sequential looks", "",
           f"Look {sq.look} of {sq.of} ({seq.spending} α spending over looks at {', '.join(map(str, seq.looks))} seeds; "
           f"futility: {'conditional power below ' + format(seq.futility.below, 'g') if seq.futility.kind != 'none' else 'none'}, "
           f"non-binding). Study decision: **{sq.decision}**. A look stops a contrast for efficacy when Holm at the "
           "family's α rejects on the repeated p-values (docs/statistics.md, \"Sequential looks\"); boundary, nominal p "
           "and spent α are the contrast's at its Bonferroni share of the family's α. A paired t's boundary is on the t "
           "scale at the look's degrees of freedom, t(df), exact for the looks' joint law; z marks a z boundary.", "",
           "| look | seeds | contrast | boundary | nominal p | spent α | statistic (p) | repeated p | conditional power | decision | recorded |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    def f(x, fmt):
        return "—" if x is None or (isinstance(x, float) and x != x) else format(x, fmt)

    def scale(r):
        return f"t({int(r.df)})" if r.scale == "t" else "z"
    for r in sq.table.itertuples():
        out.append(f"| {r.look} of {r.of} | {r.seeds} | {r.contrast} | {scale(r)} {f(r.boundary, '.3f')} | "
                   f"{f(r.nominal_p, '.4f')} | {f(r.spent_alpha, '.4f')} | {scale(r)} {f(r.statistic, '.2f')} ({f(r.p, '.3g')}) | "
                   f"{f(r.repeated_p, '.3g')} | {f(r.conditional_power, '.2f')} | {r.decision} | {r.recorded or 'this analysis'} |")
    return out + [""]


def marks(a: Analysis) -> dict[str, bool]:
    """The columns every table file of a marked report carries: ``synthetic`` (a dry run's
    simulated runs), ``exploratory`` (an analysis whose preregistration checks failed)."""
    return {**({"synthetic": True} if a.synthetic else {}), **({"exploratory": True} if a.exploratory else {})}


def results_record(a: Analysis) -> dict:
    """The record ``results.json`` holds (format ``prereg-results/1``); ``prereg analyze --json`` prints it."""
    plan = a.plan
    return {
        "format": "prereg-results/1",
        "study": plan.study.id,
        "title": plan.study.title,
        "plan": str(a.plan_path),
        "plan_hash": a.plan_hash,
        "lock": a.lock_summary,
        "exploratory": a.exploratory,
        **({"missing_runs": [{"configuration": c, "seed": s} for c, s in a.missing_runs]} if a.missing_runs else {}),
        **({"synthetic": True} if a.synthetic else {}),  # simulated by `prereg dry-run`; absent on real reports
        **({"sources": a.sources} if a.sources else {}),  # [[sources]]: each study read, its lock, its runs
        "contrasts": json_lists(_records(a.contrasts)),  # verdict_changes_under as a list
        "per_seed": _records(a.per_seed),
        "hypotheses": _records(a.hypotheses),
        "configurations": _records(a.configurations),
        "exclusions": _records(a.exclusions),
        "checks": _records(a.checks),
        "check_seeds": _records(a.check_seeds),
        "notes": a.notes + a.devices.notes,
        "devices": a.devices.counts,  # device type -> main runs (prereg_kit.study.audit.device_type)
        # stated only when off, so the results of studies that use them read as before
        **({} if plan.evaluation.common_random_numbers else {"common_random_numbers": False}),
        **({"sequential": {"look": a.sequential.look, "of": a.sequential.of, "decision": a.sequential.decision,
                           "looks": _records(a.sequential.table)}} if a.sequential else {}),
        **({"gradient_tests": {"synthetic": a.gradient.synthetic, **{k: _records(getattr(a.gradient, k)) for k in
                                                                    ("table", "fit", "conditions")}}} if a.gradient else {}),
    }


def write_report(a: Analysis, out_dir: Path) -> list[Path]:
    """Write every report file into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = a.plan
    written = []
    # tables first: they are what a reader checks the figures and verdicts against
    # curves.csv: what the figures draw, for pk.load_report; a dry run's tables say so in a column of their own
    for name, df in (("contrasts", a.contrasts), ("per_seed", a.per_seed), ("configurations", a.configurations),
                     ("curves", a.curves), ("checks", a.checks)):
        if name != "checks" or len(df):
            with writing(out_dir / f"{name}.csv"):
                df.assign(**marks(a)).to_csv(out_dir / f"{name}.csv", index=False)
            written.append(out_dir / f"{name}.csv")

    if a.sequential is not None:
        with writing(out_dir / "sequential.csv"):
            a.sequential.table.assign(**marks(a)).to_csv(out_dir / "sequential.csv", index=False)
        written.append(out_dir / "sequential.csv")
    results = results_record(a)
    with writing(out_dir / "results.json"):
        (out_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    written.append(out_dir / "results.json")

    written += report_figures(a, out_dir) + extrapolation_figures(a, out_dir)
    written += write_gradient(a.gradient, out_dir, title=plots.marked(f"{plan.study.id}: gradient tests", False, exploratory=a.exploratory),
                              synthetic=a.synthetic, marks=marks(a)) if a.gradient else []
    markdown = render_markdown(a)
    with writing(out_dir / "report.md"):
        (out_dir / "report.md").write_text(markdown)
    written.append(out_dir / "report.md")
    tex = contrasts_tex(
        a.contrasts, caption=f"{plan.study.id}: every contrast, treatment − control (fractions: 0.01 is one point). "
        "Mean over seeds with its 95% paired-t interval; Holm within each primary family; TOST at the margin in contrasts.csv.",
        label=f"{plan.study.id}-contrasts", printed_test=printed_test, is_target=is_target, synthetic=a.synthetic,
        exploratory=a.exploratory)
    with writing(out_dir / "contrasts.tex"):
        (out_dir / "contrasts.tex").write_text(tex)
    written.append(out_dir / "contrasts.tex")
    written.append(write_html(out_dir, markdown, written, synthetic=a.synthetic, exploratory=a.exploratory))  # last: it embeds the figures
    return written


def left_out_lines(df: pd.DataFrame) -> list[str]:
    """The sentence under the contrast table naming the contrasts read without some of their seeds
    (``seeds_left_out``: a seed one side has no reading for; the reasons are in the notes)."""
    if "seeds_left_out" not in df.columns:
        return []
    rows = [r for r in df.itertuples() if isinstance(r.seeds_left_out, str) and r.seeds_left_out]
    if not rows:
        return []
    return ["Read without some of their seeds (a seed that one side has no reading for is left out of the contrast's "
            "units; why: *Notes*): " + "; ".join(f"{r.contrast} without seed(s) {r.seeds_left_out}" for r in rows) + ".", ""]


def crn_sentence(plan) -> list[str]:
    """One sentence when the plan preregistered evaluations without common random numbers
    (another trainer's evaluator): what the pairing did and did not hold fixed (dense-rewards paper §C.1)."""
    if plan.evaluation.common_random_numbers:
        return []
    return ["Pairing: the plan preregistered `[evaluation] common_random_numbers = false`, so the runs of a seed "
            "were paired by seed and evaluation problems, not by their evaluation sampling seeds; each difference "
            "also carries both runs' evaluation sampling noise.", ""]


def dynamics_table(dyn: pd.DataFrame) -> list[str]:
    """Training dynamics to B per configuration (mean over runs of each run's mean over its
    iterations): reward, mixed / all-wrong / all-correct groups (dense-rewards paper §C.5.4, S27), length and
    truncation; a share the run logs do not carry reads n/a."""
    if dyn is None or not len(dyn):
        return []
    pct = lambda x: "n/a" if pd.isna(x) else f"{x:.1%}"  # noqa: E731
    out = ["", "### Training dynamics to B", "",
           "| configuration | seeds | mean reward | mixed groups | all-wrong groups | all-correct groups | "
           "mean length (tokens) | truncated |", "|---|---|---|---|---|---|---|---|"]
    for _, r in dyn.iterrows():
        out.append(f"| {r['configuration']} | {r['n_seeds']} | {'n/a' if pd.isna(r['reward_mean']) else f'{r.reward_mean:.3f}'} "
                   f"| {pct(r['mixed_share'])} | {pct(r['all_wrong_share'])} | {pct(r['all_correct_share'])} "
                   f"| {'n/a' if pd.isna(r['length_mean']) else f'{r.length_mean:.0f}'} | {pct(r['truncation_rate'])} |")
    return out


def render_markdown(a: Analysis) -> str:
    plan = a.plan
    s = plan.study
    out = [f"# {'EXPLORATORY — ' if a.exploratory else ''}{s.id}: {s.title}", "", f"**Question.** {s.question}", ""]
    if a.exploratory:
        gone = [f"`{c}/seed-{s}`" for c, s in a.missing_runs]
        out += ["> **EXPLORATORY.** The preregistration checks failed (see below); every result in this "
                "report is exploratory and carries no confirmatory weight."
                + (f" It reads the runs that exist; {len(gone)} planned run(s) are missing: {', '.join(gone)}." if gone else ""), ""]
    out += ["## Verdicts", ""] + verdict_summary(a) + [""]
    out += ["## Preregistration", "", f"- plan: `{a.plan_path}` (content {a.plan_hash[:23]}…)"]
    out += [f"- {line}" for line in a.lock_lines] if not a.synthetic else [
        "- lock and seals: written by `prereg dry-run` over a copy of the plan, for its synthetic runs; they "
        "preregister nothing and check nothing a real study would"]
    out += [f"- runs of {', '.join(r['configurations'])} from study {r['study_id']} ({r['folder']}), lock {r['lock'][:19]}…, "
            f"plan entry {r['entry']}" for r in a.sources]
    out += ["", "## Exclusions and admission", ""]
    if len(a.exclusions):
        out += ["| configuration | seed | what | reason |", "|---|---|---|---|"]
        out += [f"| {r.configuration} | {r.seed} | {r.what} | {r.reason} |" for r in a.exclusions.itertuples()]
    else:
        out.append("No run or evaluation was excluded.")
    out += [f"- rule: {rule}" for rule in plan.admission.rules]
    out += ["", "## Contrasts", "",
            "Δ is treatment − control in the contrast's metric (accuracy and rates are fractions, 0.01 = one point; "
            "relative_accuracy is a multiple of the reference's accuracy on the same seed; collapse is the "
            "difference of collapse rates, a 0/1 flag per seed), paired by seed unless the design says otherwise "
            "(difference_of_differences: (T − C) − (T' − C') per seed; pooled: one unit per (pair, seed); "
            "welch: unpaired groups, Welch's t, n = both groups); 95% t "
            f"interval. Primary contrasts are {_adjusted_words(plan)} within their family; † marks exploratory "
            f"contrasts. TOST and non-inferiority use the margin shown in `contrasts.csv` (default ±{plan.statistics.margin:g}).",
            "", contrast_table(a.contrasts), ""] + left_out_lines(a.contrasts) + flag_lines(a.contrasts) + robustness_table(a.contrasts, format_p, confidence=plan.statistics.confidence, alpha=plan.statistics.alpha) + crn_sentence(plan) + [f"Devices: {n}." for n in a.devices.notes] + [""] * bool(a.devices.notes) + extrapolation_notes(a) + ["![forest plot](forest.png)", ""]
    out += sequential_section(a)
    if len(a.checks):
        out += ["## Manipulation checks", "",
                "Each check averages a per-iteration run-log column over the iterations up to its reading point, "
                "per seed, and passes when a one-sided t over seeds shows the expected direction at "
                f"α = {plan.statistics.alpha:g} (values per seed in `results.json`, `check_seeds`).", "",
                check_table(a.checks), ""]
    out += ["## Hypotheses", ""]
    for h in a.hypotheses.itertuples():
        out += [f"**{h.id}.** {h.statement} *Prediction:* {h.prediction}", "",
                f"- outcome: **{h.outcome}** ({h.evidence})", f"- reading (fixed in the plan): {h.reading}", ""]
    cf = a.configurations
    rel, col = "relative_accuracy_at_B" in cf.columns, "collapse_rate" in cf.columns
    ref = plan.evaluation.reference
    unit, per = column_time_unit(cf["hours_at_B"] * 3600) if len(cf) else TIME_UNITS[0]
    digits = 2 if len(cf) and (cf["hours_at_B"] * 3600 / per).max() < 10 else 1
    out += ["## Compute per configuration", "",
            "| configuration | seeds | accuracy at B (mean) | "
            + (f"relative to {ref} (mean ratio) | " if rel else "")
            + ("collapsed seeds (pass@4 below evaluation 0) | " if col else "")
            + f"tokens at B | updates at B | training time to B ({unit}) | "
            "continuation share | time share: selection / generation / credit / update / sync |",
            "|---|---|---|" + "---|" * (rel + col) + "---|---|---|---|---|"]
    for _, r in cf.iterrows():
        extra = ""
        if rel:
            extra += "n/a | " if pd.isna(r["relative_accuracy_at_B"]) else f"{r['relative_accuracy_at_B']:.2f}× | "
        if col:
            frozen = cannot_change(plan, r["configuration"])
            extra += (f"— (cannot change: {frozen}) | " if frozen else "n/a | " if pd.isna(r["collapse_rate"]) else
                      f"{int(r['n_collapsed'])} / {r['n_seeds']} ({r['collapse_rate']:.0%}) | ")
        out.append(f"| {r['configuration']} | {r['n_seeds']} | {r['accuracy_at_B']:.3f} | {extra}{format_tokens(r['tokens_at_B'])} | "
                   f"{r['updates_at_B']:.0f} | {r['hours_at_B'] * 3600 / per:.{digits}f} | {r['continuation_share']:.0%} | {r['stage_shares']} |")
    if col:
        out += ["", f"A seed has collapsed when its pass@{COLLAPSE_K} at B is below its own evaluation 0 (the model before "
                "any update). A configuration that cannot change (learning rate 0) shows —: its flags could only be "
                "evaluation noise."]
    out += dynamics_table(a.dynamics)
    out += ([""] + gradient_markdown(a.gradient)) if a.gradient is not None else []
    out += ["", "![accuracy curves](accuracy.png)", "", "![difference over time](difference_vs_time.png)", ""]
    if a.notes:
        out += ["## Notes", ""] + [f"- {n}" for n in a.notes] + [""]
    out += ["Files: `contrasts.csv` (one row per contrast), `per_seed.csv` (the values behind every row, one "
            "per unit: seed, or (pair, seed) when pooled; `unit` names the pair or Welch group), "
            "`configurations.csv`, " + ("`checks.csv`, " if len(a.checks) else "") + "`results.json`, `contrasts.tex` "
            "(the contrast table in LaTeX, booktabs), `report.html` (this report as one page, figures embedded).", ""]
    return synthetic_markdown("\n".join(out)) if a.synthetic else "\n".join(out)


def console_table(a: "Analysis"):
    """The contrasts as a rich table for the terminal (what ``prereg analyze`` and ``dry-run`` print)."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=("SYNTHETIC — " if a.synthetic else "") + f"{a.plan.study.id}: contrasts"
              + (" (EXPLORATORY)" if a.exploratory else "") + (" of simulated runs, not results" if a.synthetic else ""))
    for col in ("contrast", "tier", "pair", "at", "n", "Δ [95% CI]", "tested p (Holm if primary)", "TOST p", "verdict"):
        t.add_column(col)
    for _, r in a.contrasts.iterrows():
        # a to-target reading is a share of the budget (n.r. = not reached), not a difference
        est = (escape(str(r["verdict_reason"])) if r.get("status") == "not read"
               else f"share {_share(r['mean'])} [{_share(r['ci_low'])}, {_share(r['ci_high'])}]" if is_target(r)
               else f"{r['mean']:+.3f} [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]")
        t.add_row(r["contrast"], r["tier"], r.get("comparison", f"{r['treatment']} − {r['control']}"), r["at"], str(r["n"]), est,
                  format_p(r["p_adjusted"] if r["tier"] == "primary" else r["tested_p"]), format_p(r["tost_p"]),
                  r["verdict"] + (f" {MARK} changes under {r['verdict_changes_under']}"
                                  if isinstance(r.get("verdict_changes_under"), str) and r["verdict_changes_under"] else ""))
    return t

