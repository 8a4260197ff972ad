"""The run-log figure builders on small synthetic studies (no training in the test suite).

Each builder is checked for what it shows: the numbers it plots (against the readings computed
here from the same run logs), its axis labels and its number of series.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from plans import lock_at, plan_text

from prereg_kit.chain.seal import seal_runs
from prereg_kit.plan import load_plan
from prereg_kit.runlog import load_study
from prereg_kit.simulate.synth import generate_study

LOCKED = datetime(2025, 1, 1, tzinfo=timezone.utc)  # before the synthetic runs start


def _study(tmp: Path, sid: str, effects: dict[str, float], *, edit=None) -> Path:
    """A synthetic study locked before its runs and sealed, as `prereg analyze` needs it;
    ``edit(study_dir)`` changes its run logs before they are sealed."""
    d = tmp / sid
    d.mkdir()
    configs = "".join(f"[configurations.{c}]\n" for c in effects)
    (d / "plan.toml").write_text(plan_text(id=sid, comparator="outcome", seeds="[0, 1, 2]", configurations=configs,
                                           tokens=64000, eval_every="B/4", n_problems=20, treatment="critic_filter"))
    pf = load_plan(d)
    generate_study(d, study=sid, plan_hash=pf.content_sha256, configurations=effects, seeds=[0, 1, 2],
                   budget_tokens=64000, eval_every=16000, eval_sets={"heldout": 20}, rng=1)
    if edit is not None:
        edit(d)
    lock_at(d / "plan.toml", LOCKED)
    seal_runs(d)
    return d


def _accuracy(d: Path, metric_col: str = "correct") -> pd.DataFrame:
    """Per (configuration, seed, evaluation): tokens, training seconds and the fraction
    ``metric_col`` / samples on the primary set, straight from the run logs."""
    ev = load_study(d, progress=False).evals
    ev = ev[ev["eval_set"] == "heldout"]
    g = ev.groupby(["configuration", "seed", "eval_index"])
    out = g[["tokens", "train_seconds"]].first()
    out["accuracy"] = g[metric_col].sum() / g["samples"].sum()
    return out.reset_index()


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("figs")
    a = _study(tmp, "a", {"outcome": 0.0, "critic_filter": 0.03})
    b = _study(tmp, "b", {"outcome": 0.0, "critic_filter": 0.01, "random_choice": 0.0})
    return a, b


def test_curves_builder_plots_seed_means_and_bands(studies, tmp_path):

    from figures import build_cpu_curves

    fig, data = build_cpu_curves.draw(list(studies))
    axes = fig.axes
    assert len(axes) == 4  # two studies x (tokens, time)
    assert [ax.get_xlabel() for ax in axes[::2]] == ["generated tokens (thousands)"] * 2
    assert all(ax.get_xlabel().startswith("training time (") for ax in axes[1::2])
    assert {ax.get_ylabel() for ax in axes} == {"held-out accuracy (fraction)"}
    # one line per configuration, plus the budget line on the tokens panel
    assert [len(ax.lines) for ax in axes] == [3, 2, 4, 3]
    assert [len(ax.collections) for ax in axes] == [2, 2, 3, 3]  # min-max bands
    for (sid, d), ax in zip(zip("ab", studies), axes[::2]):
        want = _accuracy(d).groupby(["configuration", "eval_index"]).agg(
            tokens=("tokens", "mean"), mean=("accuracy", "mean"), lo=("accuracy", "min"), hi=("accuracy", "max"))
        got = data[data["study"] == sid].set_index(["configuration", "eval_index"]).sort_index()
        assert np.allclose(got["accuracy_mean"], want["mean"]) and np.allclose(got["accuracy_min"], want["lo"])
        assert np.allclose(got["accuracy_max"], want["hi"]) and np.allclose(got["tokens"], want["tokens"])
        for line in ax.lines[:-1]:  # each configuration's plotted line is its seed mean
            conf = line.get_label()
            assert np.allclose(line.get_ydata(), want.loc[conf, "mean"])
            assert np.allclose(line.get_xdata(), want.loc[conf, "tokens"] / 1e3)
        assert ax.lines[-1].get_label() == "B" and ax.lines[-1].get_xdata()[0] == 64.0
    path = build_cpu_curves.build(tmp_path, list(studies))
    assert path.name == build_cpu_curves.OUTPUT and path.stat().st_size > 10_000


def test_difference_builder_plots_primary_differences_over_time(studies, tmp_path):

    from figures import build_cpu_difference

    fig, data = build_cpu_difference.draw(list(studies))
    (ax,) = fig.axes
    assert ax.get_xlabel().startswith("matched training time (") and ax.get_ylabel() == "difference in accuracy (fraction)"
    assert sorted(line.get_label() for line in ax.lines[1:]) == [  # the first line is zero
        "C1: a:critic_filter − a:outcome (n=3)", "C1: b:critic_filter − b:outcome (n=3)"]
    assert set(data["treatment"]) == {"a:critic_filter", "b:critic_filter"} and set(data["n"]) == {3}
    for tr in ("a", "b"):
        d = data[data["treatment"] == f"{tr}:critic_filter"]
        acc = _accuracy(studies["ab".index(tr)]).set_index(["configuration", "seed", "eval_index"])["accuracy"]
        # at the start of training both arms are read at their first evaluation: the difference is theirs
        first = (acc["critic_filter"].groupby("seed").first() - acc["outcome"].groupby("seed").first()).mean()
        assert d["difference"].iloc[0] == pytest.approx(first)
        line = next(ln for ln in ax.lines if ln.get_label().startswith(f"C1: {tr}:"))
        assert np.allclose(line.get_ydata(), d["difference"])
    path = build_cpu_difference.build(tmp_path, list(studies))
    assert path.name == build_cpu_difference.OUTPUT and path.stat().st_size > 10_000


def test_selection_points_and_panels(studies, tmp_path):

    from figures.build_cpu_selection import OUTPUT, build, draw, points_from, selection_points
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

    fig, data = draw(studies[1])
    left, right = fig.axes
    assert left.get_xlabel() == "change in share of mixed-outcome groups (arm − outcome-only, mean to B)"
    assert right.get_xlabel() == "candidates' mean predicted success (after warm-up)"
    assert left.get_ylabel() == "gain in held-out accuracy at B (fraction, per seed)"
    assert len(left.collections) == len(right.collections) == 2  # one scatter per arm
    acc = _accuracy(studies[1]).set_index(["configuration", "seed", "eval_index"])["accuracy"]
    last = acc.index.get_level_values("eval_index").max()
    for arm, sc in zip(("critic_filter", "random_choice"), left.collections):
        gains = [acc[(arm, s, last)] - acc[("outcome", s, last)] for s in (0, 1, 2)]
        assert np.allclose(sc.get_offsets()[:, 1], gains)
        assert np.allclose(data.loc[data["arm"] == arm, "gain"], gains)
    assert build(tmp_path, studies[1]).name == OUTPUT


def test_contrasts_builder(studies, tmp_path):
    from figures import build_cpu_contrasts

    path = build_cpu_contrasts.build(tmp_path, list(studies))
    text = path.read_text()
    assert "## a: t" in text and "| C1 | primary | critic_filter − outcome | B | 3 |" in text
    assert (tmp_path / "cpu_forest_a.png").stat().st_size > 5_000


def _shortcut_rates(d: Path) -> None:
    """The shortcut rate ``ch_negative``: high for one arm, else low."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for f in d.glob("runs/*/seed-*/evals.parquet"):
        ev = pq.read_table(f)  # keeps the run log's schema metadata (row count check)
        share = 0.75 if f.parts[-3] == "critic_filter" else 0.125
        neg = pa.array([round(s * share) for s in ev.column("samples").to_pylist()], pa.int64())
        pq.write_table(ev.append_column("ch_negative", neg), f)
    (d / "election.json").write_text(json.dumps({"elected": "correct", "kl_rev": {"correct": 0.1, "negative": 2.0},
                                                 "kl_fwd": {"correct": 0.1, "negative": 1.5}}))


def test_multireward_builder(tmp_path):
    """Channel curves from evaluation columns ``ch_negative`` and the election bars."""

    from figures.build_cpu_multireward import OUTPUT, build, draw
    from figures.cpu_studies import primary_curves

    d = _study(tmp_path, "mr", {"outcome": 0.0, "critic_filter": -0.05, "random_choice": 0.0}, edit=_shortcut_rates)
    _, _, rate = primary_curves(d, metric="negative_rate")
    assert rate.groupby("configuration")["accuracy"].mean().round(3).to_dict() == {"critic_filter": 0.75, "outcome": 0.125, "random_choice": 0.125}

    fig, data = draw(d)
    # the title says what is drawn, not a verdict the preregistered test did not give
    title = fig.get_suptitle()
    assert "the report's contrasts test them" in title and "does not" not in title and "drifts" not in title
    acc_ax, rate_ax, kl_ax = fig.axes
    assert acc_ax.get_ylabel() == "held-out accuracy (fraction)"
    assert rate_ax.get_ylabel() == "negative-answer rate (fraction of samples)"
    assert acc_ax.get_xlabel() == rate_ax.get_xlabel() == "generated tokens (thousands)"
    assert kl_ax.get_xlabel() == "probe trained on this channel alone"
    assert kl_ax.get_ylabel() == "KL from the base policy (nats per token)"
    assert len(acc_ax.lines) == len(rate_ax.lines) == 4  # three configurations and B
    assert [t.get_text() for t in kl_ax.get_xticklabels()] == ["correct ★ elected", "negative"]
    assert [round(b.get_height(), 3) for b in kl_ax.patches] == [0.1, 2.0, 0.1, 1.5]  # reverse, then forward
    rates = data[data["metric"] == "negative_rate"].groupby("configuration")["mean"].mean().round(3).to_dict()
    assert rates == {"critic_filter": 0.75, "outcome": 0.125, "random_choice": 0.125}
    want = _accuracy(d).groupby(["configuration", "eval_index"])["accuracy"].mean()
    got = data[data["metric"] == "accuracy"].set_index(["configuration", "eval_index"])["mean"].sort_index()
    assert np.allclose(got, want)
    path = build(tmp_path / "out", d)
    assert path.name == OUTPUT and path.stat().st_size > 20_000


def test_registry_cpu_studies_are_read_in_place():
    """The committed CPU studies' runs are complete under their locks: the figures read them
    through the analysis and need no training."""
    from figures.cpu_studies import REGISTRY, missing_runs, registry_study

    for name in ("cpu-grpo", "cpu-interventions", "cpu-multireward"):
        assert missing_runs(REGISTRY / name) == [], name
        assert registry_study(name) == REGISTRY / name


def test_a_study_without_runs_names_the_commands_to_train_it(tmp_path):
    """Figures never train: a study without complete runs is an error naming `prereg run`
    (and `prereg elect` first where the plan elects its anchor)."""
    import shutil

    from figures.cpu_studies import REGISTRY, MissingRunsError, registry_study

    for name in ("cpu-grpo", "cpu-multireward"):
        (tmp_path / name).mkdir()
        shutil.copy(REGISTRY / name / "plan.toml", tmp_path / name / "plan.toml")
    with pytest.raises(MissingRunsError, match=r"cpu-grpo: no complete runs to draw \(no plan.lock\); train them first: "
                                               r".*prereg lock .*cpu-grpo/plan.toml && prereg run .*cpu-grpo"):
        registry_study("cpu-grpo", registry=tmp_path)
    with pytest.raises(MissingRunsError, match=r"train them first: prereg elect .*cpu-multireward .* && prereg lock"):
        registry_study("cpu-multireward", registry=tmp_path)
    assert sorted(p.name for p in (tmp_path / "cpu-grpo").iterdir()) == ["plan.toml"]  # nothing trained or written


def test_make_figures_names_the_files_as_the_user_would_type_them(tmp_path, monkeypatch, capsys):
    """`make figures` lists what it built relative to where it runs (figures/out/…), not as absolute paths."""
    import types

    from figures import __main__ as main

    fake = types.SimpleNamespace(build=lambda out: out / "fake.png", DESCRIPTION="a fake", INPUTS="none")
    monkeypatch.setattr(main.pkgutil, "iter_modules", lambda path: [types.SimpleNamespace(name="build_fake")])
    monkeypatch.setattr(main.importlib, "import_module", lambda name: fake)
    monkeypatch.chdir(tmp_path)
    assert main.main(tmp_path / "figures" / "out") == 0
    assert capsys.readouterr().out.splitlines() == ["built figures/out/fake.png",
                                                    "1 builder(s); index at figures/out/INDEX.md"]
