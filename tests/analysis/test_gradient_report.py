"""`prereg gradient-test` with a fake trainer, the seals of its results, the statistics recomputed
from batches.parquet (against scipy), the report's section and its conditions, and the dry run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from test_gradient_plan import plan_text
from typer.testing import CliRunner

import prereg_kit.cli.gradient as gradient_command
from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.analysis.gradient import _summaries, efficiency_value, gradient_results
from prereg_kit.chain.gradient_seal import result_folder
from prereg_kit.chain.lock import lock_plan
from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.plan import load_plan
from prereg_kit.simulate.dryrun import dry_run
from prereg_kit.simulate.gradient import synthetic_batches, write_synthetic_result
from prereg_kit.study.verify import verify_study

pytestmark = pytest.mark.figures  # reads the report's figures (tests/conftest.py)

cli = CliRunner()


class FakeRunner:
    """A trainer that 'measures' with the synthetic generator (the results contract's columns)."""

    name = "fake"

    def __init__(self):
        self.calls: list[str] = []

    def gradient_test(self, study_dir, test_id, *, log=print):
        self.calls.append(test_id)
        pf = load_plan(study_dir)
        t = next(x for x in pf.plan.gradient_tests if x.id == test_id)
        folder = write_synthetic_result(result_folder(study_dir, test_id), pf.plan, t, pf.content_sha256, seed=3)
        meta = json.loads((folder / "meta.json").read_text())
        meta.update(synthetic=False, device="fake")  # as a real trainer writes it
        (folder / "meta.json").write_text(json.dumps(meta))
        log(f"{test_id}: done")
        return str(folder)


def _study(tmp_path: Path, text: str | None = None, *, locked: bool = True) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(text or plan_text())
    if locked:
        lock_plan(d / "plan.toml")
    return d


def _cli(monkeypatch, fake, *args):
    monkeypatch.setattr(gradient_command, "load_runner", lambda name=None, command="": fake)
    res = cli.invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output
    return res


def test_the_command_runs_each_test_once_and_seals_its_files(tmp_path, monkeypatch):
    d, fake = _study(tmp_path), FakeRunner()
    res = _cli(monkeypatch, fake, "gradient-test", d)
    assert res.exit_code == 0, res.output
    assert fake.calls == ["G1"] and "sealed batches.parquet, meta.json" in res.output
    # then the result as the report reads it: Table 6's layout with intervals
    assert "| configuration | per update [95% CI] | per token [95% CI] |" in res.output and "**G1** (complete" in res.output
    seal = [e for e in json.loads((d / "plan.lock").read_text())["entries"] if e["kind"] == "gradient"]
    assert len(seal) == 1 and seal[0]["test"] == "G1" and set(seal[0]["files"]) == {"batches.parquet", "meta.json"}
    assert seal[0]["plan_hash"] == load_plan(d).content_sha256
    rep = verify_study(d)
    assert rep.exit_code == 0 and any("1 sealed gradient result" in i for i in rep.info), rep.violations
    # a second run is refused before the trainer is called
    again = _cli(monkeypatch, fake, "gradient-test", d, "--test", "G1")
    assert again.exit_code == 1 and "sealed already" in again.output and fake.calls == ["G1"]


def test_refusals_before_the_trainer_runs(tmp_path, monkeypatch):
    fake = FakeRunner()
    d = _study(tmp_path, locked=False)
    res = _cli(monkeypatch, fake, "gradient-test", d)
    assert res.exit_code == 1 and "locked plan" in res.output and not fake.calls
    lock_plan(d / "plan.toml")
    res = _cli(monkeypatch, fake, "gradient-test", d, "--test", "G2")
    assert res.exit_code == 2 and "'G2' is not a gradient test of the plan (have: G1)" in res.output
    res = _cli(monkeypatch, object(), "gradient-test", d)
    assert res.exit_code == 2 and "cannot run gradient tests" in res.output
    # a complete result nobody sealed is not overwritten, nor sealed after the fact
    FakeRunner().gradient_test(d, "G1")
    res = _cli(monkeypatch, fake, "gradient-test", d)
    assert res.exit_code == 1 and "never sealed" in res.output and not fake.calls
    assert verify_study(d).exit_code == 1 and "not sealed" in " ".join(verify_study(d).violations)


def test_a_plan_changed_after_the_lock_refuses_the_test(tmp_path, monkeypatch):
    d, fake = _study(tmp_path), FakeRunner()
    (d / "plan.toml").write_text(plan_text().replace("batches = 8", "batches = 9"))
    res = _cli(monkeypatch, fake, "gradient-test", d)
    assert res.exit_code == 1 and "gradient_tests[0].batches: 8 → 9" in res.output and not fake.calls


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """A dry run of the gradient plan: runs and a synthetic, sealed gradient result."""
    d = tmp_path_factory.mktemp("dry")
    (d / "plan.toml").write_text(plan_text())
    return dry_run(d / "plan.toml", {}, out=d / "dry-run", n_resamples=300, progress=False)


def test_dry_run_reports_the_section_marked_synthetic(dry, without_figures):
    g = dry.analysis.gradient
    assert g is not None and g.synthetic and set(g.table["status"]) == {"synthetic"}
    md = (dry.folder / "report" / "report.md").read_text()
    assert "## Gradient tests (SYNTHETIC" in md and "| configuration | per update [95% CI] | per token [95% CI]" in md
    row = g.table.set_index("configuration").loc["mc_k4"]
    assert f"{row.per_token:.2f} [{row.per_token_ci_low:.2f}, {row.per_token_ci_high:.2f}]" in md
    assert np.isnan(g.table.set_index("configuration").loc["outcome", "alignment"])  # its update lies in V
    assert "a + b/k fit" in md and "mc_k4 per_token ≥ 0.8" in md
    out = dry.folder / "report"
    assert (out / "gradient_tests.csv").exists() and (out / "gradient_tests.png").stat().st_size > 0
    assert json.loads((out / "results.json").read_text())["gradient_tests"]["synthetic"] is True
    with without_figures():  # the command's figures are the fixture's, drawn and read above
        res = cli.invoke(app, ["dry-run", str(dry.folder.parent / "plan.toml"), "--out", str(dry.folder.parent / "again"),
                               "--resamples", "100"])
    assert res.exit_code == 0, res.output


def _copy(dry, tmp_path) -> Path:
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(dry.folder, d)
    return d


def test_an_edited_or_removed_result_fails_verify_and_analyze(dry, tmp_path):
    d = _copy(dry, tmp_path)
    assert verify_study(d).exit_code == 0
    batches = d / "gradient" / "G1" / "batches.parquet"
    df = pd.read_parquet(batches)
    df.loc[0, "dot_uh"] += 1.0
    df.to_parquet(batches, index=False)
    rep = verify_study(d)
    assert rep.exit_code == 1 and any(v.startswith("gradient/G1/batches.parquet: changed") for v in rep.violations)
    with pytest.raises(PreregError) as e:
        analyze_study(d, n_resamples=50, progress=False)
    assert e.value.exit_code == 1 and "gradient/G1/batches.parquet" in " ".join(e.value.lines)
    a = analyze_study(d, exploratory=True, n_resamples=50, progress=False)  # listed, never read
    assert set(a.gradient.table["status"]) == {"refused"} and set(a.gradient.conditions["verdict"]) == {"refused"}
    from prereg_kit.report import write_report

    write_report(a, d / "report")
    assert "**G1**: not read: its result fails its seal" in (d / "report" / "report.md").read_text()
    batches.unlink()
    assert any(v.startswith("gradient/G1/batches.parquet: removed") for v in verify_study(d).violations)
    import shutil

    shutil.rmtree(d / "gradient")
    assert any("sealed (entry" in v and "the result is gone" in v for v in verify_study(d).violations)


def test_an_analysis_reads_the_lock_chain_once(dry, tmp_path, lock_reads):
    """verify reads plan.lock; the gradient tests' seals are read from that chain, not from the
    file again (it was read three times more). A caller without the chain still reads it itself."""
    d = _copy(dry, tmp_path)
    a = analyze_study(d, n_resamples=50, progress=False)
    assert a.gradient is not None and set(a.gradient.table["status"]) == {"synthetic"}
    assert lock_reads == [d / "plan.lock"]
    lock_reads.clear()
    assert efficiency_value(d, a.plan, "G1:critic_td") > 0 and len(lock_reads) == 1
    lock_reads.clear()
    gradient_results(d, a.plan, n_resamples=20)
    assert len(lock_reads) == 1


def test_an_added_file_or_result_fails_verify(dry, tmp_path):
    d = _copy(dry, tmp_path)
    (d / "gradient" / "G1" / "notes.txt").write_text("added later")
    assert any(v.startswith("gradient/G1/notes.txt: added") for v in verify_study(d).violations)
    (d / "gradient" / "G1" / "notes.txt").unlink()
    extra = d / "gradient" / "G9"
    extra.mkdir()
    (extra / "batches.parquet").write_bytes(b"x")
    assert any(v.startswith("gradient/G9: a gradient result that is not sealed") for v in verify_study(d).violations)


def test_a_condition_flips_when_its_threshold_crosses_the_estimate(dry, tmp_path, without_figures):
    v = float(dry.analysis.gradient.table.set_index("configuration").loc["mc_k4", "per_token"])
    verdicts = {}
    for name, bound in (("below", v * 0.9), ("above", v * 1.1)):
        d = tmp_path / name
        d.mkdir()
        (d / "plan.toml").write_text(plan_text().replace("at_least = 0.8", f"at_least = {bound!r}"))
        with without_figures():  # the verdict is in the report's text; the figures are the fixture's
            a = dry_run(d / "plan.toml", {}, out=d / "dry-run", n_resamples=100, progress=False).analysis
        assert float(a.gradient.table.set_index("configuration").loc["mc_k4", "per_token"]) == pytest.approx(v)
        verdicts[name] = a.gradient.conditions["verdict"].iloc[0]
        # a dry run's report bolds nothing: the condition's line ends with its verdict
        assert f": {verdicts[name]}\n" in (d / "dry-run" / "report" / "report.md").read_text()
    assert verdicts == {"below": "met", "above": "not met"}


def test_a_test_not_run_is_rows_marked_not_run(tmp_path):
    text = plan_text() + plan_text()[plan_text().index("\n[[gradient_tests]]"):].replace('id = "G1"', 'id = "G2"')
    d = _study(tmp_path, text)
    g = gradient_results(d, load_plan(d).plan, n_resamples=20)
    assert set(g.table["status"]) == {"not run"} and len(g.table) == 8
    assert set(g.conditions["verdict"]) == {"not run"} and any("G2: not run" in n for n in g.notes)


def test_efficiency_value_is_the_sealed_per_token_estimate(dry, tmp_path):
    plan = load_plan(dry.folder).plan
    table = dry.analysis.gradient.table.set_index("configuration")
    assert efficiency_value(dry.folder, plan, "G1:critic_td") == pytest.approx(table.loc["critic_td", "per_token"])
    for bad, msg in (("G2:mc_k4", "expected TEST:configuration"), ("G1", "expected TEST:configuration"),
                     ("G1:short", "not a configuration of gradient test G1")):
        with pytest.raises(PreregError, match=msg):
            efficiency_value(dry.folder, plan, bad)
    d = _study(tmp_path)
    with pytest.raises(PreregError, match="gradient test G1 has not run"):
        efficiency_value(d, load_plan(d).plan, "G1:mc_k4")


# ----------------------------------------------------------------------------- statistics


def _frame(B: int = 30, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for c, (a, k, tok) in {"base": (3.0, 0, 100), "x": (4.0, 1, 300), "y": (3.5, 4, 900)}.items():
        for b in range(B):
            d = a + rng.normal()
            rows.append({"test": "G", "batch": b, "configuration": c, "mc_k": k, "dot_uh": d, "uu": 3 + 2 / max(k, 1) + rng.random(),
                         "perp_dh": rng.normal() + 1, "perp_dd": 2.0, "perp_hh": 3.0, "tokens": tok + b})
    return pd.DataFrame(rows)


def test_summaries_against_direct_formulas_and_scipy():
    df = _frame()
    rows, _ = _summaries(df, ["base", "x"], "base", [], n_resamples=20_000, seed=1, confidence=0.95)
    w = {c: g.sort_values("batch") for c, g in df.groupby("configuration")}
    eff = {c: g["dot_uh"].mean() ** 2 / g["uu"].mean() for c, g in w.items()}
    x = rows[1]
    assert x["per_update"] == pytest.approx(eff["x"] / eff["base"])
    assert x["per_token"] == pytest.approx((eff["x"] / w["x"]["tokens"].mean()) / (eff["base"] / w["base"]["tokens"].mean()))
    t = sps.ttest_1samp(w["x"]["dot_uh"], 0.0).statistic  # z = mean / (sd / √B)
    assert x["positivity_z"] == pytest.approx(t) and x["positivity_pass"] == (t >= 3)
    cos = w["x"]["perp_dh"] / np.sqrt(6.0)
    assert x["alignment"] == pytest.approx(np.clip(cos, -1, 1).mean())  # a cosine is clipped to [−1, 1] against rounding

    def ratio(d, uu, bd, buu, axis=-1):
        return (d.mean(axis) ** 2 / uu.mean(axis)) / (bd.mean(axis) ** 2 / buu.mean(axis))

    ref = sps.bootstrap((w["x"]["dot_uh"].to_numpy(), w["x"]["uu"].to_numpy(), w["base"]["dot_uh"].to_numpy(),
                         w["base"]["uu"].to_numpy()), ratio, paired=True, vectorized=True, n_resamples=20_000,
                        method="percentile", random_state=7).confidence_interval
    width = ref.high - ref.low
    assert x["per_update_ci_low"] == pytest.approx(ref.low, abs=0.04 * width)
    assert x["per_update_ci_high"] == pytest.approx(ref.high, abs=0.04 * width)


def test_the_fit_recovers_a_and_b_and_the_papers_bound():
    df = _frame()
    for k, c in ((1, "x"), (4, "y")):
        df.loc[df["configuration"] == c, "uu"] = 2.0 + 6.0 / k  # noise-free: a = 2, b = 6
    _, fit = _summaries(df, ["base", "x", "y"], "base", ["x", "y"], n_resamples=200, seed=0, confidence=0.95)
    assert (fit["a"], fit["b"], fit["at_k"]) == (pytest.approx(2.0), pytest.approx(6.0), 4.0)
    share = 1.5 / 3.5
    assert fit["share"] == pytest.approx(share) and fit["reallocation_bound"] == pytest.approx(1 / (1 - share))
    assert fit["share_ci_low"] == pytest.approx(share) and fit["share_ci_high"] == pytest.approx(share)
    assert round(1 / (1 - 0.038), 2) == 1.04  # the paper's arithmetic: 3.8% at k = 4 → 1.04


def test_batches_that_do_not_line_up_are_refused():
    df = _frame()
    df = df[~((df["configuration"] == "x") & (df["batch"] == 3))]
    with pytest.raises(PreregError, match="batches differ from the baseline"):
        _summaries(df, ["base", "x"], "base", [], n_resamples=10, seed=0, confidence=0.95)


def test_the_synthetic_table_has_the_contract_columns(tmp_path):
    pf = load_plan(_study(tmp_path, locked=False))
    df = synthetic_batches(pf.plan, pf.plan.gradient_tests[0], seed=0)
    contract = ["test", "batch", "configuration", "credit_rule", "mc_k", "dot_uh", "uu", "hh", "perp_dh", "perp_dd",
                "perp_hh", "alignment", "v_rank", "projection_residual", "rollout_tokens", "continuation_tokens",
                "tokens", "seconds"]
    assert list(df.columns) == contract and len(df) == 8 * 4
    mc = df[df["configuration"] == "mc_k4"].iloc[0]
    # 4 prompts × 4 completions; k = 4 continuations at 3 cuts of at most 64 tokens, half on average
    assert mc["continuation_tokens"] == pytest.approx(16 * 4 * 3 * 64 // 2, rel=0.11)
    assert (df["tokens"] == df["rollout_tokens"] + df["continuation_tokens"]).all()
