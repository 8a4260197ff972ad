"""The CPU studies behind the run-log figures: locked copies under ``build/figure-studies/``, trained
with the built-in trainer the first time (a few minutes each on 2 cores) and reused afterwards
(complete runs are skipped), so a second ``make figures`` reproduces the same outputs quickly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "build" / "figure-studies"


def trained_study(name: str, *, work: Path = WORK) -> Path:
    """``registry/<name>`` locked and run in ``work/<name>``; returns that study folder.

    A copy whose plan differs from the registry's is rebuilt from scratch (it is a build
    product, never the user's data: only folders under ``build/`` are touched).
    """
    from prereg_kit.lock import lock_plan
    from trainer.launch import run_study

    src = REPO / "registry" / name / "plan.toml"
    dst = work / name
    if (dst / "plan.toml").exists() and (dst / "plan.toml").read_bytes() != src.read_bytes():
        shutil.rmtree(dst)
    dst.mkdir(parents=True, exist_ok=True)
    if not (dst / "plan.toml").exists():
        shutil.copyfile(src, dst / "plan.toml")
    lock_plan(dst / "plan.toml")
    jobs = run_study(dst, n_jobs=1)  # one at a time: each run already uses the cores it is given
    failed = [j for j in jobs if str(j.result).startswith("failed")]
    if failed:
        raise RuntimeError(f"{name}: {len(failed)} run(s) failed, e.g. {failed[0].configuration} seed {failed[0].seed}")
    return dst


def primary_curves(study_dir: Path):
    """Accuracy curves (primary set, plan's verifier) and the plan of a trained study."""
    from prereg_kit import readings as rd
    from prereg_kit.plan import load_plan
    from prereg_kit.runlog import load_study

    plan = load_plan(study_dir).plan
    st = load_study(study_dir, progress=False)
    verifier = plan.evaluation.verifier if plan.evaluation.verifier != "math_verify" else "default"
    return plan, st, rd.accuracy_curve(st.evals, eval_set=plan.evaluation.primary, verifier=verifier)
