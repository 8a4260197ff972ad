"""``prereg gradient-test``: run a locked plan's gradient tests through the trainer and seal them.

A gradient test is a measurement at one fixed policy (dense-rewards paper §2.4, Appendix A,
Appendix I), preregistered in ``[[gradient_tests]]`` like any contrast: it runs
only from a locked, unchanged plan (:func:`prereg_kit.study.jobs.require_locked`), once per test. The
trainer behind the ``prereg_kit.runners`` entry point measures it
(``runner.gradient_test(study_dir, test_id, *, log) -> str``, writing
``gradient/<id>/batches.parquet`` and ``meta.json``); the core then seals the result into the
lock chain (:mod:`prereg_kit.chain.gradient_seal`) so that ``prereg verify`` and ``prereg analyze``
detect any later edit.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from ..analysis.gradient import gradient_results
from ..chain.gradient_seal import read_result_meta, result_folder, seal_gradient, sealed_tests
from ..chain.lock import read_chain
from ..errors import PreregError, ViolationError
from ..plan import load_plan
from ..report.gradient import gradient_markdown
from ..study.jobs import require_locked
from .runners import load_runner


def run_gradient_tests(study_dir: str | Path, tests: list[str] | None, runner: Any = None, *, runner_name: str | None = None,
                       log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the plan's gradient tests (``tests``: these ids; default all) with ``runner`` (default:
    the installed trainer ``runner_name``, loaded once the plan has passed its checks) and seal
    each result as it completes; return the seal entries. Refuses, before running anything, an
    unlocked or changed plan, an unknown id, a test sealed already and a complete result that
    nobody sealed (a result is written and sealed only here)."""
    pf = load_plan(study_dir)
    require_locked(pf)
    plan, study = pf.plan, pf.path.parent
    ids = [t.id for t in plan.gradient_tests]
    if not ids:
        raise PreregError(f"{pf.path}: the plan has no [[gradient_tests]] (docs/gradient-tests.md)")
    for bad in [x for x in tests or [] if x not in ids]:
        raise PreregError(f"--test: {bad!r} is not a gradient test of the plan (have: {', '.join(ids)})")
    if runner is None:
        runner = load_runner(runner_name, command="gradient-test")
    if not callable(getattr(runner, "gradient_test", None)):
        raise PreregError(f"the trainer {getattr(runner, 'name', type(runner).__name__)!r} cannot run gradient tests "
                          "(it has no gradient_test method)")
    chosen = list(dict.fromkeys(tests)) if tests else ids
    sealed = sealed_tests(read_chain(pf.path))
    for tid in chosen:
        if tid in sealed:
            e = sealed[tid]
            raise ViolationError(f"gradient/{tid}: sealed already (entry {e['index']}, {e['time']}): a gradient test "
                                 "runs once under a locked plan")
        folder = result_folder(study, tid)
        if (folder / "meta.json").is_file():
            try:
                status = read_result_meta(folder).get("status")
            except PreregError:
                status = None
            if status == "complete":
                raise ViolationError(f"{folder}: a complete result that was never sealed: move it away to run the test again")
    entries = []
    for tid in chosen:
        log(f"gradient test {tid}: running")
        written = Path(runner.gradient_test(study, tid, log=log))
        if written.resolve() != result_folder(study, tid).resolve():
            raise PreregError(f"gradient test {tid}: the trainer wrote {written}, not {result_folder(study, tid)}")
        e = seal_gradient(study, tid)
        log(f"gradient test {tid}: sealed {', '.join(e['files'])} (entry {e['index']}, {e['time']})")
        entries.append(e)
    return entries


def summary_lines(study_dir: str | Path, tests: list[str]) -> list[str]:
    """The report's gradient-test section for ``tests`` (their sealed results, every interval
    recomputed from ``batches.parquet`` with the plan's statistics), without the figure: what
    ``prereg gradient-test`` prints once the results are sealed. A gradient test is a screen the
    plan reads before training (S3: "train only if per-token efficiency ≥ 0.8"), so showing it
    does not unblind any contrast."""
    pf = load_plan(study_dir)
    g = gradient_results(pf.path.parent, pf.plan)

    def keep(df):
        return df[df["test"].isin(tests)] if len(df) else df

    g = dataclasses.replace(g, table=keep(g.table), fit=keep(g.fit), conditions=keep(g.conditions))
    return [line for line in gradient_markdown(g) if not line.startswith("![")]


__all__ = ["run_gradient_tests", "summary_lines"]
