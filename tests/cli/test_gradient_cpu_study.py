"""registry/cpu-gradient end to end on a shortened copy (slow: it measures every configuration of
the study's gradient test on the tiny model): lock, `prereg gradient-test`, `prereg verify`, then
an edit of the sealed result that verify must catch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from paths import ROOT
from typer.testing import CliRunner

from prereg_kit.cli import app

pytestmark = pytest.mark.slow


def _short_copy(tmp_path: Path) -> Path:
    d = tmp_path / "cpu-gradient"
    d.mkdir()
    text = (ROOT / "registry/cpu-gradient/plan.toml").read_text()
    text = text.replace("batches = 96", "batches = 3").replace("batches = 48", "batches = 2")
    # warm-up stays 4: the critics are in use from iteration 4 on (before that their credit is outcome-only's);
    # the warm start is the study's own, the shipped one (copied, not built)
    (d / "plan.toml").write_text(text)
    return d


def test_the_cpu_studys_gradient_test_runs_seals_and_reports_every_configuration(tmp_path):
    d = _short_copy(tmp_path)
    cli = CliRunner()
    assert cli.invoke(app, ["lock", str(d)]).exit_code == 0
    res = cli.invoke(app, ["gradient-test", str(d)])
    assert res.exit_code == 0, res.output
    assert (d / "gradient/G2/batches.parquet").is_file()  # the equal-iteration probe's form too
    df = pd.read_parquet(d / "gradient/G1/batches.parquet")
    names = ["outcome", "mc_k1", "mc_k2", "mc_k4", "critic_td", "critic_baseline"]
    assert sorted(df["configuration"].unique()) == sorted(names) and len(df) == 3 * len(names)
    by = df.groupby("configuration")
    # outcome-only reweights whole completions: no alignment; the dense rules have one
    assert by["alignment"].apply(lambda s: s.isna().all())["outcome"]
    assert by["alignment"].apply(lambda s: s.notna().any())[["mc_k1", "mc_k4", "critic_td"]].all()
    # Monte-Carlo rules pay for continuations, more at larger k; the critics generate none
    cont = by["continuation_tokens"].sum()
    assert cont["outcome"] == cont["critic_td"] == cont["critic_baseline"] == 0
    assert 0 < cont["mc_k1"] < cont["mc_k2"] < cont["mc_k4"]
    assert cli.invoke(app, ["verify", str(d)]).exit_code == 0
    # a sealed result edited afterwards is caught
    df.loc[df["configuration"] == "mc_k4", "dot_uh"] *= 2
    df.to_parquet(d / "gradient/G1/batches.parquet", index=False)
    res = cli.invoke(app, ["verify", str(d)])
    assert res.exit_code != 0 and "batches.parquet" in res.output, res.output
    shutil.rmtree(d / ".cache", ignore_errors=True)
