"""A locked plan written as a registry's preregistration: OSF's "OSF Preregistration" template or
AsPredicted's eight questions, with the lock chain's head hash and the study's timestamp receipts.

A registration filed on a registry is held by the registry, dated by it and out of the author's
reach: the one outside anchor a reader can check without trusting the author's folder. Each answer
is drawn from the plan as the lock chain holds it (its last plan entry, never the file on disk),
so the registration says what was locked. The export holds the chain's **head** (the ``hash`` of
its last entry, as ``prereg verify --head`` takes it) and copies every receipt that stamps an
entry of the chain, so that a reader later runs::

    prereg verify STUDY --head <the registration's head> --receipts <the registration's folder>

The registries and their questions are chosen by name from :data:`REGISTRIES`; every answer comes
from one function per question, shared where the two registries ask the same thing. It lives in
``study/`` (not ``chain/``): it is a view of a study's locked plan for readers, like its status,
and it reads the chain only for the head and the receipts.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..chain.lock import Chain, read_chain
from ..chain.timestamp import RECEIPT_SUFFIX, TIMESTAMPS_DIR, receipt_name
from ..errors import PreregError
from ..plan import Contrast, Plan, resolve_plan_path, validate_plan
from ..plan.canonical import canonical_json
from ..plan.designs import seed_text
from ..plan.diff import describe
from .jobs import run_summary


@dataclass(frozen=True)
class Locked:
    """What every answer reads: the plan as locked and its chain."""

    plan: Plan
    chain: Chain
    study: Path


Answer = Callable[[Locked], str]


# ------------------------------------------------------------------ answers, one per question


def _hypotheses(s: Locked) -> str:
    if not s.plan.hypotheses:
        return "The plan states no [[hypotheses]]; the confirmatory tests are its primary contrasts (analysis plan)."
    out = []
    for h in s.plan.hypotheses:
        readings = "; ".join(f"{k}: {v}" for k, v in h.readings.items())
        tests = f" Tested by {', '.join(h.contrasts)}." if h.contrasts else ""
        out.append(f"{h.id}: {h.statement}. Prediction: {h.prediction}.{tests} Readings: {readings}.")
    return "\n".join(out)


def _study_type(s: Locked) -> str:
    return ("Experiment: computational. Language-model training runs (reinforcement learning, "
            f"trainer {s.plan.study.trainer!r}) under named configurations of one recipe, compared with "
            f"the comparator {s.plan.study.comparator!r} at matched compute.")


def _blinding(s: Locked) -> str:
    return ("No human participants or raters. The main stage is run blind: `prereg run` and `prereg status` show "
            "progress and compute only, no accuracy or contrast, until `prereg analyze`. Answers are scored by the "
            f"plan's verifier ({s.plan.evaluation.verifier!r}), not by people.")


def _design(s: Locked) -> str:
    p = s.plan
    b = p.budget
    lines = [f"Question: {p.study.question}", f"Comparator: {p.study.comparator}.",
             "Runs: " + "; ".join(run_summary(p)) + ".",
             f"Run length B: {b.describe()} (evaluated every {b.eval_every}); every configuration is read at matched "
             "compute (the reading point of each contrast)."]
    if p.study.description:
        lines.append(p.study.description)
    return "\n".join(lines)


def _randomization(s: Locked) -> str:
    p = s.plan
    crn = ("evaluations share their sampling seeds across configurations (common random numbers)"
           if p.evaluation.common_random_numbers else "evaluations do not share sampling seeds across configurations")
    return (f"No random assignment: every configuration runs the plan's explicit seeds ({seed_text(p.all_seeds())}); a seed "
            f"fixes a run's randomness and pairs the configurations seed by seed; {crn}. Statistical resampling uses "
            f"seed {p.statistics.seed}.")


def _sealed(s: Locked) -> list[dict[str, Any]]:
    return s.chain.seals


def _existing_data(s: Locked) -> str:
    sealed, locked = _sealed(s), s.chain.entries[0]["time"]
    audit = (f"The plan was locked {locked}; `prereg verify` fails any main run that started before the lock or under "
             "a plan entry a later amendment changed.")
    if not sealed:
        return f"Registration prior to creation of data: no main run is sealed in the lock chain at export. {audit}"
    return (f"Registration prior to analysis of the data: {len(sealed)} main run(s) sealed in the lock chain at export "
            f"(entries {sealed[0]['index']}–{sealed[-1]['index']}, first {sealed[0]['time']}). {audit}")


def _collection(s: Locked) -> str:
    p = s.plan
    sets = ", ".join(f"{e.name} ({e.n_problems} problems)" if e.n_problems else e.name for e in p.evaluation.sets)
    model = f" from model {p.study.model!r}" if p.study.model else ""
    return (f"Each run trains{model} with the trainer {p.study.trainer!r} on the shared recipe "
            f"{canonical_json(p.recipe)} with its configuration's overrides (variables). Evaluations every "
            f"{p.budget.eval_every} on {sets}: {p.evaluation.samples} sample(s) per problem at temperature "
            f"{p.evaluation.temperature:g}, scored by the {p.evaluation.verifier!r} verifier. A completed main run is "
            "sealed into the lock chain (the sha256 of every file).")


def _sample_size(s: Locked) -> str:
    p = s.plan
    per = "; ".join(f"{c.id}: {len(p.contrast_seeds(c))} seeds" for c in p.contrasts)
    return f"{'; '.join(run_summary(p))}. Seeds read per contrast: {per}."


def _rationale(s: Locked) -> str:
    p = s.plan
    n = len(p.all_seeds())
    return (f"The unit of analysis is the seed: each contrast is a test over {n} seed(s) per configuration, seeds × "
            f"configurations = {sum(len(p.configuration_seeds(c)) for c in p.configurations_for('main'))} main runs. "
            "The plan records no power analysis; `prereg dry-run --repeat` gives the power of this design by "
            "simulation for chosen true effects.")


def _stopping(s: Locked) -> str:
    q = s.plan.sequential
    if q is None:
        return ("No interim analysis: every main run trains to its run length, and the analysis reads every seed once, "
                "after all main runs are complete and sealed.")
    rho = f" (rho {q.rho:g})" if q.rho is not None else ""
    fut = "none" if q.futility.kind == "none" else f"non-binding, conditional power below {q.futility.below:g}"
    return (f"Group-sequential looks at {', '.join(map(str, q.looks))} seeds per configuration; alpha spent by "
            f"{q.spending}{rho}; futility: {fut}; contrasts looked at: {', '.join(q.contrasts or ['every primary contrast'])}. "
            "Each look is recorded in the lock chain before the next.")


def _manipulated(s: Locked) -> str:
    out = []
    for name, c in s.plan.configurations.items():
        parts = [c.description] if c.description else []
        if name == s.plan.study.comparator:
            parts.append("the comparator")
        parts.append(f"overrides {canonical_json(c.overrides)}" if c.overrides else "the shared recipe")
        if not c.runnable:
            parts.append(f"not runnable: {c.not_runnable}")
        out.append(f"{name}: {'; '.join(parts)}")
    return "\n".join(out)


def _measured(s: Locked) -> str:
    p = s.plan
    points = sorted({c.at for c in p.contrasts})
    metrics = sorted({c.metric or p.evaluation.metric for c in p.contrasts})
    lines = [f"Metric(s): {', '.join(metrics)} (fractions: 0.01 is one point), on {p.evaluation.primary} unless a "
             f"contrast names another set; read at {', '.join(points)}."]
    lines += [f"Manipulation check {c.id}: {c.metric} of {c.configuration} expected {c.expect} "
              f"(threshold {c.threshold:g}, up to {c.at})." for c in p.checks]
    return "\n".join(lines)


def _contrast(p: Plan, c: Contrast) -> str:
    pair = " vs ".join(x for x in (c.treatment, c.control) if x) or "pooled pairs " + ", ".join("/".join(x) for x in c.pairs)
    if c.minus_treatment or c.minus_control:
        pair = f"({pair}) − ({c.minus_treatment} vs {c.minus_control})"
    rob = f"; robustness: {', '.join(c.robustness)}" if c.robustness else ""
    return (f"{c.id} ({c.tier}, {c.kind}): {pair}; design {c.design}, test {c.test}, {c.alternative}; read at {c.at} on "
            f"{c.metric or p.evaluation.metric} ({c.eval_set or p.evaluation.primary}); seeds "
            f"{seed_text(p.contrast_seeds(c))}; margin {p.margin_of(c)}; prediction {c.prediction}{rob}.")


def _models(s: Locked) -> str:
    return "\n".join(_contrast(s.plan, c) for c in s.plan.contrasts)


def _transformations(s: Locked) -> str:
    return ("None beyond the reading: per seed, each configuration's metric is read at the contrast's reading point "
            "(matched compute); the tested quantity is the per-seed difference treatment − control, or as the "
            "contrast's design says (difference of differences, pooled pairs, Welch on unpaired values).")


def _inference(s: Locked) -> str:
    p = s.plan
    st = p.statistics
    fams = "; ".join(f"family {f.name} ({', '.join(f.members)}): {f.method} at alpha {f.alpha:g}" for f in p.families)
    return (f"alpha {st.alpha:g} (each contrast's alternative as listed), confidence {st.confidence:g}; margin "
            f"{st.margin} unless a contrast gives its own (per contrast: "
            + "; ".join(f"{c.id} {p.margin_of(c)}" for c in p.contrasts) + "); "
            + (fams or "no family adjustment") + f"; bootstrap resamples {st.bootstrap_resamples}.")


def _exclusion(s: Locked) -> str:
    a = s.plan.admission
    rules = "; ".join(a.rules)
    return (f"Runs must be complete: {'yes' if a.require_complete else 'no'}; minimum iterations: {a.min_iterations or 'none'}; drift "
            f"threshold {a.drift_threshold:g} (drifted runs: {a.drifted})." + (f" Further rules: {rules}." if rules else "")
            + " Run folders the plan does not name are a violation, not data.")


def _missing(s: Locked) -> str:
    if s.plan.admission.allow_missing_seeds:
        return "Seeds without a complete run are left out of the contrasts that need them, and the report says so."
    return ("A missing or incomplete main run stops the analysis (`prereg analyze` refuses); "
            "`--exploratory` reads what exists, and labels every output EXPLORATORY.")


def _exploratory(s: Locked) -> str:
    ex = [c.id for c in s.plan.contrasts if c.tier == "exploratory"]
    return ((f"Exploratory-tier contrasts: {', '.join(ex)}. " if ex else "")
            + "Anything not in this plan is reported as exploratory; `prereg analyze --exploratory` labels every output so.")


def _amendments(s: Locked) -> str:
    plan_entries = s.chain.plan_entries
    if len(plan_entries) == 1:
        return f"Locked {plan_entries[0]['time']}; no amendment."
    out = [f"Locked {plan_entries[0]['time']}; amendments:"]
    for e in plan_entries[1:]:
        changes = "; ".join(describe(c) for c in e.get("changes", [])) or "comments or layout only"
        out.append(f"entry {e['index']} ({e['time']}): {e.get('reason', '')} [{changes}]")
    return "\n".join(out)


def _other(s: Locked) -> str:
    anchors = s.plan.integrity.anchors
    return "\n".join([_amendments(s), f"Lock chain head: {s.chain.head['hash']} (entry {s.chain.head['index']}, "
                      f"{s.chain.head['kind']}, {s.chain.head['time']}); outside anchors declared: "
                      f"{', '.join(anchors) if anchors else 'none'}."])


def _data_collected(s: Locked) -> str:
    sealed = _sealed(s)
    head = "No." if not sealed else f"Yes: {len(sealed)} main run(s) were run and sealed after the lock."
    return f"{head} {_existing_data(s)}"


def _aspredicted_other(s: Locked) -> str:
    return "\n".join([f"Stopping rule: {_stopping(s)}", f"Exploratory: {_exploratory(s)}", _other(s)])


# ------------------------------------------------------------------ the registries

Question = tuple[str, str, str, Answer]  # key, section, question as the registry asks it, answer

OSF: list[Question] = [
    ("title", "Study information", "Title", lambda s: s.plan.study.title),
    ("description", "Study information", "Description", lambda s: s.plan.study.question
     + (f" {s.plan.study.description}" if s.plan.study.description else "")),
    ("hypotheses", "Study information", "Hypotheses", _hypotheses),
    ("study_type", "Design plan", "Study type", _study_type),
    ("blinding", "Design plan", "Blinding", _blinding),
    ("study_design", "Design plan", "Study design", _design),
    ("randomization", "Design plan", "Randomization", _randomization),
    ("existing_data", "Sampling plan", "Existing data", _existing_data),
    ("data_collection_procedures", "Sampling plan", "Data collection procedures", _collection),
    ("sample_size", "Sampling plan", "Sample size", _sample_size),
    ("sample_size_rationale", "Sampling plan", "Sample size rationale", _rationale),
    ("stopping_rule", "Sampling plan", "Stopping rule", _stopping),
    ("manipulated_variables", "Variables", "Manipulated variables", _manipulated),
    ("measured_variables", "Variables", "Measured variables", _measured),
    ("statistical_models", "Analysis plan", "Statistical models", _models),
    ("transformations", "Analysis plan", "Transformations", _transformations),
    ("inference_criteria", "Analysis plan", "Inference criteria", _inference),
    ("data_exclusion", "Analysis plan", "Data exclusion", _exclusion),
    ("missing_data", "Analysis plan", "Missing data", _missing),
    ("exploratory_analysis", "Analysis plan", "Exploratory analysis", _exploratory),
    ("other", "Other", "Other", _other),
]

ASPREDICTED: list[Question] = [
    ("title", "Title", "Title", lambda s: s.plan.study.title),
    ("data_collected", "1", "Have any data been collected for this study already?", _data_collected),
    ("hypothesis", "2", "What's the main question being asked or hypothesis being tested in this study?",
     lambda s: f"{s.plan.study.question}\n{_hypotheses(s)}"),
    ("dependent_variable", "3", "Describe the key dependent variable(s) specifying how they will be measured.", _measured),
    ("conditions", "4", "How many and which conditions will participants be assigned to?",
     lambda s: f"{len(s.plan.configurations)} configurations (every one runs every seed):\n{_manipulated(s)}"),
    ("analyses", "5", "Specify exactly which analyses you will conduct to examine the main question/hypothesis.",
     lambda s: f"{_models(s)}\nInference: {_inference(s)}"),
    ("outliers_exclusions", "6", "Describe exactly how outliers will be defined and handled, and your precise rule(s) for "
     "excluding observations.", lambda s: f"{_exclusion(s)} {_missing(s)}"),
    ("sample_size", "7", "How many observations will be collected or what will determine sample size?",
     lambda s: f"{_sample_size(s)} {_rationale(s)}"),
    ("other", "8", "Anything else you would like to pre-register?", _aspredicted_other),
]

REGISTRIES: dict[str, tuple[str, list[Question]]] = {
    "osf": ("OSF Preregistration", OSF),
    "aspredicted": ("AsPredicted", ASPREDICTED),
}


@dataclass(frozen=True)
class Exported:
    registry: str
    markdown: Path
    json: Path
    head: dict[str, Any]
    receipts: list[Path]
    verify: str  # the command a reader runs


def registration(study_dir: str | Path, registry: str) -> tuple[Locked, dict[str, Any]]:
    """The registration of the locked plan of ``study_dir`` for ``registry`` (``osf``,
    ``aspredicted``) as a JSON document: the template, the head, and one field per question."""
    if registry not in REGISTRIES:
        raise PreregError(f"unknown registry {registry!r}: one of {', '.join(REGISTRIES)}")
    plan_path = resolve_plan_path(study_dir)
    chain = read_chain(plan_path)  # an unlocked plan: one line, exit 2
    last = chain.last
    plan = validate_plan(last["content"], source=f"{chain.path} (entry {last['index']})")
    s = Locked(plan, chain, plan_path.parent)
    template, questions = REGISTRIES[registry]
    fields = {key: {"section": section, "question": question, "answer": answer(s)} for key, section, question, answer in questions}
    head = {k: chain.head[k] for k in ("index", "kind", "time", "hash")}
    doc = {"registry": registry, "template": template, "study": plan.study.id, "title": plan.study.title,
           "locked_at": chain.entries[0]["time"], "plan_entry": {k: last[k] for k in ("index", "time", "content_sha256")},
           "head": head, "anchors": list(plan.integrity.anchors), "fields": fields}
    return s, doc


def export_registration(study_dir: str | Path, registry: str, out: str | Path) -> Exported:
    """Write ``<registry>-registration.md`` and ``.json`` into ``out`` (made if needed) and copy
    the study's receipts that stamp entries of its chain (and the TSA certificates kept with them)."""
    s, doc = registration(study_dir, registry)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    folder = s.study / TIMESTAMPS_DIR
    names = {receipt_name(e["hash"]) for e in s.chain.entries}
    copied = []
    if folder.is_dir():
        for p in sorted(folder.glob(f"*{RECEIPT_SUFFIX}")) + sorted(folder.glob("*.pem")):
            if p.suffix == RECEIPT_SUFFIX and p.name not in names:
                continue  # a receipt of no entry proves nothing a reader should keep
            shutil.copyfile(p, out / p.name)
            if p.suffix == RECEIPT_SUFFIX:
                copied.append(out / p.name)
    doc["receipts"] = [p.name for p in copied]
    verify = f"prereg verify STUDY --head {doc['head']['hash']}" + (f" --receipts {out}" if copied else "")
    doc["verify"] = verify
    md, js = out / f"{registry}-registration.md", out / f"{registry}-registration.json"
    js.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    md.write_text(_markdown(doc), encoding="utf-8")
    return Exported(registry, md, js, doc["head"], copied, verify)


def _markdown(doc: dict[str, Any]) -> str:
    lines = [f"# {doc['title']}", "", f"{doc['template']} of study `{doc['study']}`, exported by prereg-kit from its "
             f"locked plan (locked {doc['locked_at']}; plan entry {doc['plan_entry']['index']}).", "",
             f"- Lock chain head: `{doc['head']['hash']}` (entry {doc['head']['index']}, {doc['head']['kind']}, "
             f"{doc['head']['time']})",
             f"- Timestamp receipts: {', '.join(f'`{n}`' for n in doc['receipts']) or 'none'}",
             f"- A reader checks the study against this registration with `{doc['verify']}`", ""]
    section = None
    for f in doc["fields"].values():
        answer = f["answer"].replace("\n", "\n\n")  # each line of an answer its own paragraph
        if f["section"] == f["question"]:  # a section of one field (AsPredicted's title)
            section = f["section"]
            lines += [f"## {section}", "", answer, ""]
            continue
        if f["section"] != section:
            section = f["section"]
            lines += [f"## {section}" if not section.isdigit() else f"## Question {section}", ""]
        lines += [f"### {f['question']}", "", answer, ""]
    return "\n".join(lines)


__all__ = ["Exported", "REGISTRIES", "export_registration", "registration"]
