"""docs/run-log.md, "Converting another trainer's logs", is executed: its command and its Python
block run against files laid out as the section describes, and the study reads with load_study."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest
import typer
from importfiles import PROBLEMS, locked_study, write_verl_run
from paths import ROOT
from typer.testing import CliRunner

from prereg_kit import cli
from prereg_kit.integrations import command
from prereg_kit.runlog import load_study, read_meta

DOC = ROOT / "docs" / "run-log.md"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## Converting another trainer's logs")
    end = text.index("\n## ", start + 3)
    return text[start:end]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", _section(), flags=re.S)


def _my_run(root: Path) -> None:
    """The files the section's Python block reads: steps.csv and evals/<steps done>.jsonl."""
    run = root / "my_run"
    (run / "evals").mkdir(parents=True)
    pd.DataFrame({"step": range(1, 11), "gen_tokens": 400, "t_generate": 1.5, "t_reward": 0.2, "t_update": 0.8,
                  "reward": 0.5}).to_csv(run / "steps.csv", index=False)
    for step in (0, 5, 10):
        lines = [json.dumps({"problem": f"q{k}", "output": f"\\boxed{{{a}}}" if (k + step) % 3 else "no idea", "answer": a})
                 for k, (_, a) in enumerate(PROBLEMS) for _ in range(2)]
        (run / "evals" / f"{step}.jsonl").write_text("\n".join(lines) + "\n")


def test_the_section_runs_and_the_study_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = locked_study(tmp_path / "my-study")
    write_verl_run(tmp_path / "verl_run", 0, 0.4)
    _my_run(tmp_path)
    # the command, as the prereg app runs it once the prereg_kit.commands group is installed
    (cmd,) = _blocks("bash")
    argv = shlex.split(cmd.replace("\\\n", " "))
    assert argv[:2] == ["prereg", "import"]
    app = typer.Typer(add_completion=False)
    app.registered_commands = list(cli.app.registered_commands)
    app.registered_callback = cli.app.registered_callback
    app.add_typer(command.app, name="import")
    res = CliRunner().invoke(app, argv[1:])
    assert res.exit_code == 0, res.output
    # the Python block, as written
    (code,) = _blocks("python")
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)  # the documentation's own code
    assert Path(ns["folder"]).resolve() == study / "runs" / "B" / "seed-0"
    runs = load_study(study, strict=True)
    assert set(zip(runs.meta["configuration"], runs.meta["seed"])) == {("A", 0), ("B", 0)}
    ev = runs.evals[runs.evals["configuration"] == "B"]
    at5 = ev[ev["iteration"] == 5]
    assert (at5["tokens"] == 2000).all() and at5["train_seconds"].iloc[0] == pytest.approx(5 * 2.5)
    assert (ev["samples"] == 2).all() and ev["correct_strict"].le(ev["correct"]).all()
    assert read_meta(ns["folder"]).trainer == "my-trainer" and read_meta(study / "runs" / "A" / "seed-0").trainer == "verl"
    from prereg_kit.chain.lock import read_chain

    assert {s["run"] for s in read_chain(study / "plan.toml").seals} == {"runs/A/seed-0", "runs/B/seed-0"}
