"""The CPU studies behind the run-log figures.

Each CPU study keeps its lock and run logs in the registry (``registry/cpu-*/plan.lock`` and
``runs/``, about 1.5 MB in all; ``make cpu-studies`` trains them in place). The figures read them
there, so ``make figures`` on a fresh clone needs no training. A study whose registry copy has no
complete, locked runs (the user deleted them, or changed the plan) is trained instead into a
locked copy under ``build/figure-studies/`` (minutes per study on 2 cores; complete runs are
reused by later builds).
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "registry"
WORK = REPO / "build" / "figure-studies"


def complete_runs(study_dir: Path) -> bool:
    """True when the study's plan matches its lock and every main run of the plan is complete
    under the lock's hash (what ``prereg analyze`` needs, without retraining)."""
    from prereg_kit.errors import PreregError
    from prereg_kit.runlog import read_meta
    from prereg_kit.verify import verify_study
    from trainer.launch import plan_jobs

    if not (study_dir / "plan.lock").exists():
        return False
    try:
        report = verify_study(study_dir)  # chain intact, plan unchanged, runs after the lock
        if report.violations or report.problems:
            return False
        _, jobs = plan_jobs(study_dir)
        return all((j.folder / "meta.json").exists() and read_meta(j.folder).status == "complete" for j in jobs)
    except (PreregError, OSError, ValueError):
        return False


def trained_study(name: str, *, work: Path = WORK, registry: Path = REGISTRY) -> Path:
    """The study folder whose run logs the figures read: ``registry/<name>`` when its locked runs
    are all complete, else a locked copy ``work/<name>`` trained with the built-in trainer.

    A copy whose plan differs from the registry's is rebuilt from scratch (it is a build
    product, never the user's data: only folders under ``build/`` are touched).
    """
    if complete_runs(registry / name):
        return registry / name
    from prereg_kit.lock import lock_plan
    from trainer.launch import run_study

    src = registry / name / "plan.toml"
    dst = work / name
    if (dst / "plan.toml").exists() and (dst / "plan.toml").read_bytes() != src.read_bytes():
        shutil.rmtree(dst)
    dst.mkdir(parents=True, exist_ok=True)
    if not (dst / "plan.toml").exists():
        shutil.copyfile(src, dst / "plan.toml")
    if needs_election(dst) and not (dst / "election.json").exists():
        elect_anchor(dst)
    lock_plan(dst / "plan.toml")
    jobs = run_study(dst, n_jobs=1)  # one at a time: each run already uses the cores it is given
    failed = [j for j in jobs if str(j.result).startswith("failed")]
    if failed:
        raise RuntimeError(f"{name}: {len(failed)} run(s) failed, e.g. {failed[0].configuration} seed {failed[0].seed}")
    return dst


def needs_election(study_dir: Path) -> bool:
    """A configuration names ``anchor = "elected"``: the study needs ``prereg elect`` before its runs."""
    from prereg_kit.plan import load_plan

    plan = load_plan(study_dir).plan
    return any(plan.resolved_config(c).get("anchor") == "elected" for c in plan.configurations)


def elect_anchor(study_dir: Path) -> None:
    """Anchor election with the settings the registry's CPU study was elected with (its Makefile target)."""
    from trainer.elect import elect

    elect(study_dir, **ELECTION_SETTINGS)


# `prereg elect registry/cpu-multireward` as `make cpu-studies` runs it (the Makefile's ELECT_ARGS).
ELECTION_SETTINGS: dict = {"seeds": [0], "steps": 12, "prompts": 32, "samples": 4}


def primary_curves(study_dir: Path, metric: str = "accuracy"):
    """Curves of ``metric`` (primary set, plan's verifier), the run logs and the plan of a trained study."""
    from prereg_kit import readings as rd
    from prereg_kit.plan import load_plan
    from prereg_kit.runlog import load_study

    plan = load_plan(study_dir).plan
    st = load_study(study_dir, progress=False)
    verifier = plan.evaluation.verifier if plan.evaluation.verifier != "math_verify" else "default"
    return plan, st, rd.accuracy_curve(st.evals, eval_set=plan.evaluation.primary, verifier=verifier, metric=metric)
