"""The run-log figure builders on small synthetic studies (no training in the test suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prereg_kit.plan import load_plan
from prereg_kit.synth import generate_study

from plans import lock_at, plan_text


def _study(tmp: Path, sid: str, effects: dict[str, float]) -> Path:
    d = tmp / sid
    d.mkdir()
    configs = "".join(f"[configurations.{c}]\n" for c in effects)
    (d / "plan.toml").write_text(plan_text(id=sid, comparator="outcome", seeds="[0, 1, 2]", configurations=configs,
                                           tokens=64000, eval_every="B/4", n_problems=20, treatment="critic_filter"))
    pf = load_plan(d)
    generate_study(d, study=sid, plan_hash=pf.content_sha256, configurations=effects, seeds=[0, 1, 2],
                   budget_tokens=64000, eval_every=16000, eval_sets={"heldout": 20}, rng=1)
    return d


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("figs")
    a = _study(tmp, "a", {"outcome": 0.0, "critic_filter": 0.03})
    b = _study(tmp, "b", {"outcome": 0.0, "critic_filter": 0.01, "random_choice": 0.0})
    return a, b


def test_curves_and_difference_builders(studies, tmp_path):
    from figures import build_cpu_curves, build_cpu_difference

    for mod in (build_cpu_curves, build_cpu_difference):
        path = mod.build(tmp_path, list(studies))
        assert path.name == mod.OUTPUT and path.stat().st_size > 10_000


def test_selection_points_and_panels(studies, tmp_path):
    from figures.build_cpu_selection import OUTPUT, build, points_from, selection_points
    from figures.cpu_studies import primary_curves

    pts = selection_points(studies[1])  # synthetic logs carry no selection columns
    assert set(pts["arm"]) == {"critic_filter", "random_choice"} and len(pts) == 6
    assert pts["d_mixed"].notna().all() and pts["pred_candidates"].isna().all()
    plan, st, curves = primary_curves(studies[1])
    its = st.iterations.assign(sel_warmup=st.iterations["iteration"] < 2,
                               sel_pred_candidates=0.25 + 0.01 * (st.iterations["seed"] + 1))
    pts = points_from(curves, its, plan.budget.tokens)
    at_b = curves[curves["eval_index"] == curves["eval_index"].max()].set_index(["configuration", "seed"])["accuracy"]
    row = pts[(pts["arm"] == "critic_filter") & (pts["seed"] == 1)].iloc[0]
    assert row["pred_candidates"] == pytest.approx(0.27)
    assert row["gain"] == pytest.approx(at_b[("critic_filter", 1)] - at_b[("outcome", 1)])
    assert build(tmp_path, studies[1]).name == OUTPUT


def test_contrasts_builder(studies, tmp_path):
    from datetime import datetime, timezone

    from figures import build_cpu_contrasts
    from prereg_kit.lock import lock_plan

    from prereg_kit.seal import seal_runs

    for d in studies:  # analyze needs a lock dated before the runs, and sealed runs
        if not (d / "plan.lock").exists():
            lock_at(d / "plan.toml", datetime(2025, 1, 1, tzinfo=timezone.utc))
            seal_runs(d)
    path = build_cpu_contrasts.build(tmp_path, list(studies))
    text = path.read_text()
    assert "## a: t" in text and "| C1 | primary | critic_filter − outcome | B | 3 |" in text
    assert (tmp_path / "cpu_forest_a.png").stat().st_size > 5_000


def test_multireward_builder(tmp_path):
    """Channel curves from evaluation columns ``ch_negative`` and the election bars."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from figures.build_cpu_multireward import OUTPUT, build
    from figures.cpu_studies import primary_curves

    d = _study(tmp_path, "mr", {"outcome": 0.0, "critic_filter": -0.05, "random_choice": 0.0})
    for f in d.glob("runs/*/seed-*/evals.parquet"):  # the shortcut rate: high for one arm, else low
        ev = pq.read_table(f)  # keeps the run log's schema metadata (row count check)
        share = 0.75 if f.parts[-3] == "critic_filter" else 0.125
        neg = pa.array([round(s * share) for s in ev.column("samples").to_pylist()], pa.int64())
        pq.write_table(ev.append_column("ch_negative", neg), f)
    (d / "election.json").write_text(json.dumps({"elected": "correct", "kl_rev": {"correct": 0.1, "negative": 2.0},
                                                 "kl_fwd": {"correct": 0.1, "negative": 1.5}}))
    _, _, rate = primary_curves(d, metric="negative_rate")
    assert rate.groupby("configuration")["accuracy"].mean().round(3).to_dict() == {"critic_filter": 0.75, "outcome": 0.125, "random_choice": 0.125}
    path = build(tmp_path / "out", d)
    assert path.name == OUTPUT and path.stat().st_size > 20_000


def test_registry_cpu_studies_are_read_in_place(tmp_path):
    """The committed CPU studies' runs are complete under their locks: the figures need no training."""
    from figures.cpu_studies import REGISTRY, complete_runs, trained_study

    for name in ("cpu-grpo", "cpu-interventions", "cpu-multireward"):
        assert complete_runs(REGISTRY / name), name
        assert trained_study(name, work=tmp_path) == REGISTRY / name
    assert not list(tmp_path.iterdir())  # nothing trained
    assert not complete_runs(tmp_path)  # no lock: train a copy
