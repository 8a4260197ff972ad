"""A real client: TRL's GRPOTrainer trains examples/trl_grpo (two configurations × three seeds,
the built-in tiny model and synthetic task, on the CPU) through PreregCallback, and
`prereg analyze` reports the study — the steps of `make trl-example`. Slow (a few minutes)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

pytest.importorskip("trl")

from prereg_kit.runlog import ITERATION_COLUMNS

pytestmark = pytest.mark.skipif("seconds_step" not in {c.name for c in ITERATION_COLUMNS},
                                reason="the run-log format has no unsplit seconds_step yet")


def _run(*cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, *cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.mark.slow
def test_trl_example_trains_six_runs_and_is_analyzed(tmp_path: Path):
    from prereg_kit.runlog import read_meta, read_run

    study = tmp_path / "trl-example"
    shutil.copytree(ROOT / "examples" / "trl_grpo", study)
    assert _run("-m", "prereg_kit", "lock", str(study / "plan.toml"), cwd=tmp_path).returncode == 0
    for configuration in ("grpo", "frozen"):
        for seed in (0, 1, 2):
            r = _run(str(study / "train.py"), str(study), "--configuration", configuration, "--seed", str(seed), cwd=tmp_path)
            assert r.returncode == 0, r.stderr[-3000:]
            # the callback's progress lines, blind in the main stage (nothing printed by train.py itself)
            assert f"{configuration} seed {seed}: evaluation 4 at iteration" in r.stderr, r.stderr[-3000:]
            assert not re.search(r"\bacc\b|accuracy|contrast", r.stderr), r.stderr[-3000:]
            folder = study / "runs" / configuration / f"seed-{seed}"
            meta, run = read_meta(folder), read_run(folder, strict=True)
            assert (meta.status, meta.trainer, meta.source["trl"]) == ("complete", "trl", __import__("trl").__version__)
            it = run.iterations
            assert it["tokens_rollout"].sum() >= 2500 and it["seconds_step"].notna().all()
            assert it["seconds_generation"].isna().all()  # TRL does not split its stages: never invented
            assert (it["trl_num_tokens"].diff().dropna() > it["tokens_rollout"].iloc[1:].to_numpy()).all()  # + prompts
            assert sorted(run.evals["eval_index"].unique()) == [0, 1, 2, 3, 4]
    # the same evaluation sampling seeds across the configurations of a seed: common random numbers
    a = read_run(study / "runs" / "grpo" / "seed-1").evals
    b = read_run(study / "runs" / "frozen" / "seed-1").evals
    assert a["eval_seed"].tolist() == b["eval_seed"].tolist()
    r = _run("-m", "prereg_kit", "analyze", str(study), cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    report = (study / "report" / "report.md").read_text()
    assert "C1" in report and "grpo" in report and "frozen" in report
