"""`make demo` respects the reader's time: the demo study is registry/cpu-grpo at demo size (and
locks), the warm start it needs is shipped with its recorded hash (a changed copy is not used),
`prereg run` writes a progress line at least every ten seconds when its output is not a terminal
(blind in the main stage), and the template's smoke stage is short."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from paths import ROOT

from prereg_kit.plan import load_plan

DEMO = ROOT / "examples" / "demo" / "plan.toml"
CPU_GRPO = ROOT / "registry" / "cpu-grpo" / "plan.toml"
TRL_EXAMPLE = ROOT / "examples" / "trl_grpo" / "plan.toml"
SHIPPED = ROOT / "trainer" / "data" / "warmstarts"


# --- the demo study ------------------------------------------------------------------------------

def test_the_demo_is_cpu_grpo_at_demo_size_and_nothing_else():
    """Every key of the demo plan equals registry/cpu-grpo's except the documented few."""
    from trainer.config import config_of

    demo, full = load_plan(DEMO).plan, load_plan(CPU_GRPO).plan
    assert demo.seeds_for() == [0, 1, 2, 3] and full.seeds_for() == [0, 1, 2, 3, 4, 5]
    assert (demo.budget.tokens, full.budget.tokens) == (15_000, 30_000)
    assert demo.budget.eval_interval_tokens() == 3_750 and full.budget.eval_interval_tokens() == 3_750
    for name in full.configurations:  # the same trainer settings, threads aside
        a, b = config_of(demo, name).model_dump(), config_of(full, name).model_dump()
        assert (a["engine"].pop("threads"), b["engine"].pop("threads")) == (1, 2)
        assert a == b, name
    d, f = (tomllib.loads(p.read_text()) for p in (DEMO, CPU_GRPO))
    for key in ("hypotheses", "contrasts", "families", "statistics", "evaluation", "admission", "stages"):
        if key == "hypotheses":  # "four seeds" in the inconclusive reading
            d[key][0]["readings"]["inconclusive"] = f[key][0]["readings"]["inconclusive"]
        assert d[key] == f[key], key
    changed = {k for k in f["study"] if d["study"].get(k) != f["study"][k]}
    assert changed == {"id", "title", "question", "seeds", "source"}


def test_the_demo_plan_locks_and_its_warm_start_is_the_shipped_one(tmp_path):
    """The demo locks as committed, and the warm start its recipe asks for is the one shipped (a
    change of the warm-start settings or their key would make every demo build it again); so is
    the TRL example's and every CPU study's (their held-out sets are the same size, so their task
    files and warm start are the same)."""
    from prereg_kit.chain.lock import lock_plan
    from trainer.config import config_of
    from trainer.core.assets import synthetic_eval_size, task_files, warm_start_key

    (tmp_path / "plan.toml").write_text(DEMO.read_text())
    lock_plan(tmp_path / "plan.toml")
    assert (tmp_path / "plan.lock").is_file()
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    for plan in (DEMO, TRL_EXAMPLE, *sorted((ROOT / "registry").glob("cpu-*/plan.toml"))):
        loaded = load_plan(plan).plan
        cfg = config_of(loaded, next(iter(loaded.configurations)))
        train, _ = task_files(cfg, tmp_path / "cache", synthetic_eval_size(loaded.evaluation.sets))
        assert f"warmstart-{warm_start_key(cfg, train)}" in manifest, plan


def test_the_makefile_demo_runs_the_demo_study_two_at_once_and_can_scale_up():
    text = (ROOT / "Makefile").read_text()
    assert "DEMO_PLAN ?= examples/demo/plan.toml" in text and "DEMO_JOBS ?= 2" in text
    assert "$(PREREG) run $(DEMO_DIR) --jobs $(DEMO_JOBS)" in text
    readme = (ROOT / "README.md").read_text()
    assert "make demo DEMO_PLAN=registry/cpu-grpo/plan.toml DEMO_JOBS=1" in readme


# --- the shipped warm start ------------------------------------------------------------------------

def test_the_shipped_warm_start_has_its_recorded_hash():
    from trainer.core.assets import weights_sha256

    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    assert manifest
    for name, recorded in manifest.items():
        assert weights_sha256(SHIPPED / name) == recorded, name
        assert json.loads((SHIPPED / name / "warmstart.json").read_text())["model_sha256"] == recorded


def _small_config(tmp_path: Path):
    """A small tiny-model configuration (1 layer, hidden 32, 3 warm-start steps) and its train file."""
    from plans import run_plan

    from trainer.config import config_of
    from trainer.core.assets import task_files

    plan = tmp_path / "plan.toml"
    plan.write_text(run_plan(id="ws", comparator="frozen", treatment="grpo", configurations=(
        "[configurations.grpo]\n[configurations.frozen]\noverrides = { learning_rate = 0.0 }\n"),
        tokens=300, eval_every="B/2", samples=2, n_problems=4, warm_steps=3))
    cfg = config_of(load_plan(plan).plan, "grpo")
    train, _ = task_files(cfg, tmp_path / "cache", 4)
    return cfg, train


def test_a_shipped_warm_start_is_copied_and_a_changed_one_is_refused_then_rebuilt(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import trainer.core.assets as assets

    cfg, train = _small_config(tmp_path)
    built = assets.warm_start(cfg, tmp_path / "cache", train, shipped=None)
    recorded = assets.weights_sha256(built)
    shipped = tmp_path / "shipped"
    shutil.copytree(built, shipped / built.name)
    (shipped / "manifest.json").write_text(json.dumps({built.name: recorded}))

    def no_build(*args):
        raise AssertionError("built although a good copy was shipped")

    with monkeypatch.context() as m:  # a good copy: copied into the cache, nothing built
        m.setattr(assets, "_train_warm_start", no_build)
        lines: list[str] = []
        got = assets.warm_start(cfg, tmp_path / "cache2", train, lines.append, shipped=shipped)
        assert got == tmp_path / "cache2" / built.name and assets.weights_sha256(got) == recorded
        assert lines == [f"warm start: the shipped weights {shipped / built.name} ({recorded}, as recorded) → {got}"]

    weights = shipped / built.name / "model.safetensors"  # one byte changed: refused, built, compared
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    lines = []
    got = assets.warm_start(cfg, tmp_path / "cache3", train, lines.append, shipped=shipped, log_every=0)
    refused = [ln for ln in lines if "not used" in ln]
    assert len(refused) == 1 and str(shipped / built.name) in refused[0] and f"records {recorded}" in refused[0]
    assert assets.weights_sha256(got) == recorded  # the deterministic build gives the recorded weights again
    assert lines[-1] == f"warm start: the rebuilt weights are equal to the recorded {recorded}"
    steps = [ln for ln in lines if ln.startswith("warm start: step ")]
    assert [ln.split(",")[0] for ln in steps] == ["warm start: step 1/3", "warm start: step 2/3", "warm start: step 3/3"]

    (shipped / "manifest.json").write_text("[not a manifest")  # unreadable: said, and built
    lines = []
    assets.warm_start(cfg, tmp_path / "cache4", train, lines.append, shipped=shipped)
    assert lines[0].startswith(f"warm start: {shipped / 'manifest.json'}: unreadable")


def test_warm_start_lines_name_paths_relative_to_where_the_user_is(tmp_path, monkeypatch):
    """`prereg run studies/x` prints the cache as typed (studies/x/.cache/…) and a shipped warm start
    under the current directory relative to it; one shipped inside an installed package by its
    place in the package (trainer/data/warmstarts/…), never an absolute path."""
    from trainer.core import assets

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(assets, "warm_start_key", lambda cfg, train: "k1")
    folder = tmp_path / "shipped" / "warmstart-k1"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    recorded = assets.weights_sha256(folder)
    (folder.parent / "manifest.json").write_text(json.dumps({folder.name: recorded}))
    lines: list[str] = []
    assets.warm_start(None, Path("studies/x/.cache"), None, lines.append, shipped=folder.parent)
    assert lines == [f"warm start: the shipped weights shipped/warmstart-k1 ({recorded}, as recorded) → studies/x/.cache/warmstart-k1"]
    assert assets._shown(assets.SHIPPED_WARM_STARTS / "warmstart-k1") == "trainer/data/warmstarts/warmstart-k1"
    assert assets._shown(tmp_path / "studies" / "x") == "studies/x"


# --- progress lines --------------------------------------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _job(name: str, seed: int, stop: int = 15_000):
    spec = SimpleNamespace(stop_tokens=stop, iteration_stop=None)
    return SimpleNamespace(configuration=name, seed=seed, spec=spec, progress={}, process=None, result="")


def _drive(blind: bool):
    """Two runs side by side for 120 fake seconds: a 25-second start-up with no progress, one
    iteration every 4 s, an evaluation every 3 iterations, a 30-second stall; the launcher's
    thread ticks once a second. Returns the (time, line) pairs written."""
    from trainer.progress_lines import RunLines

    clock = FakeClock()
    out: list[tuple[float, str]] = []
    jobs = [_job("grpo", 0), _job("frozen", 0)]
    lines = RunLines(jobs, lambda m: out.append((clock.t, m)), blind=blind, clock=clock)
    for step in range(121):
        clock.t = float(step)
        for j in jobs:
            j.process = object()  # both started at 0
            it = (step - 25) // 4 if 25 <= step < 110 and not 60 <= step < 90 else None
            if it is not None and step % 4 == 1 and it >= 0:
                j.progress.update(iteration=it, tokens=1250 * it, accuracy=0.5)
                j.progress.pop("eval_index", None)
                if it % 3 == 0:
                    j.progress["eval_index"] = it // 3
                lines.update(j)
        if step == 110:
            for j in jobs:
                j.result = "complete"
                lines.done(j)
        if step == 115:
            lines.update(jobs[0])  # a late record after the end writes nothing
        lines.tick()
    return out


@pytest.mark.parametrize("blind", [True, False])
def test_progress_lines_come_at_least_every_ten_seconds_and_stay_blind_in_the_main_stage(blind):
    out = _drive(blind)
    for name in ("grpo seed 0", "frozen seed 0"):
        times = [t for t, m in out if m.startswith(name + ":")]
        ended = max(t for t, m in out if m.startswith(name + ": complete"))
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert times[0] == 0 and max(gaps) <= 10, (name, gaps)  # one at least every 10 s while it runs
        assert not [t for t in times if t > ended]  # nothing after it ended
    texts = [m for _, m in out]
    assert "grpo seed 0: started" in texts
    assert "grpo seed 0: starting (imports, model, evaluation sets) (5 s)" in texts  # the silent start-up
    assert any(m.startswith("grpo seed 0: evaluation 2 at iteration 6, 7.5K / 15.0K tokens") for m in texts)
    assert any(m.startswith("grpo seed 0: iteration 8, 10.0K / 15.0K tokens (") for m in texts)  # the stall
    assert any(m.startswith("grpo seed 0: complete at iteration") for m in texts)
    assert any("acc" in m for m in texts) is not blind, texts


def test_prereg_run_to_a_pipe_writes_plain_lines_not_a_bar(tmp_path, monkeypatch):
    """The launcher picks plain lines for a console that is not a terminal, bars for one that is."""
    import io

    from rich.console import Console

    import trainer.launch as launch

    jobs = [SimpleNamespace(configuration="grpo", seed=0, state="new", result="", progress={}, process=None,
                            spec=SimpleNamespace(stop_tokens=100, iteration_stop=None), folder=tmp_path)]
    pf = SimpleNamespace(plan=SimpleNamespace(), path="plan.toml", content_sha256="0" * 64)
    monkeypatch.setattr(launch, "plan_jobs", lambda *a, **k: (pf, jobs))
    monkeypatch.setattr(launch, "plan_flat_keys", lambda plan: [])
    monkeypatch.setattr(launch, "prepare", lambda jobs, log=print: None)
    used = []

    def fake_run_jobs(jobs, n_jobs=None, on_progress=lambda j: None, on_done=lambda j: None):
        for j in jobs:
            j.progress.update(iteration=2, tokens=100)
            on_progress(j)
            j.result = "complete"
            on_done(j)
        return jobs

    monkeypatch.setattr(launch, "run_jobs", fake_run_jobs)
    monkeypatch.setattr(launch, "_run_with_bars", lambda *a: used.append("bars"))
    buf = io.StringIO()
    launch.run_study(tmp_path, console=Console(file=buf, width=200))
    assert "grpo seed 0: started\n" in buf.getvalue() and "grpo seed 0: complete at iteration 2, 100 / 100 tokens" in buf.getvalue()
    assert "\x1b[" not in buf.getvalue() and not used  # no colours, no bar
    launch.run_study(tmp_path, console=Console(file=io.StringIO(), force_terminal=True))
    assert used == ["bars"]


def test_main_stage_runs_may_run_side_by_side_on_a_cpu_but_never_share_a_gpu(tmp_path, monkeypatch):
    import trainer.launch as launch
    from prereg_kit.errors import PreregError

    monkeypatch.setattr(launch, "plan_jobs", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("planned")))
    monkeypatch.setattr(launch, "default_jobs", lambda: (1, [None]))  # CPU only: no device to share
    with pytest.raises(RuntimeError, match="planned"):
        launch.run_study(tmp_path, n_jobs=2)
    monkeypatch.setattr(launch, "default_jobs", lambda: (1, ["0"]))  # one GPU
    with pytest.raises(PreregError, match=r"--jobs 2 > 1 CUDA device\(s\)"):
        launch.run_study(tmp_path, n_jobs=2)


# --- the template's smoke stage --------------------------------------------------------------------

def test_the_templates_smoke_stage_is_short_and_the_template_locks(tmp_path):
    from importlib import resources

    from prereg_kit.chain.lock import lock_plan

    with resources.as_file(resources.files("prereg_kit") / "templates" / "plan.toml") as tpl:
        text = Path(tpl).read_text()
    (tmp_path / "plan.toml").write_text(text)
    plan = load_plan(tmp_path / "plan.toml").plan
    for name in plan.configurations:
        assert plan.train_to(name, "smoke") <= 0.1 and plan.train_to(name, "main") == 1.0
    lock_plan(tmp_path / "plan.toml")
    assert (tmp_path / "plan.lock").is_file()


@pytest.mark.slow
def test_the_shipped_warm_start_is_what_a_build_from_scratch_gives_on_its_cpu_kind(tmp_path):
    """Built from scratch (nothing shipped), the CPU studies' warm start has the shipped weights,
    on the CPU kind it was built on (other kernels may round otherwise: docs/trainer.md)."""
    pytest.importorskip("torch")
    from trainer.config import config_of
    from trainer.core.assets import task_files, warm_start, weights_sha256
    from trainer.loop import cpu_kind

    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    cfg = config_of(load_plan(CPU_GRPO).plan, "grpo")
    train, _ = task_files(cfg, tmp_path, 64)
    built = warm_start(cfg, tmp_path, train, shipped=None)
    on = json.loads((SHIPPED / built.name / "warmstart.json").read_text())["built_on"]["cpu"]
    if on != cpu_kind():
        pytest.skip(f"shipped from {on}, this machine is {cpu_kind()}")
    assert weights_sha256(built) == manifest[built.name]


def test_dry_run_and_analyze_write_a_line_every_few_seconds_to_a_log(monkeypatch, capsys):
    """Not a terminal: the dry run names its steps and a long loop says where it is; a terminal
    (or progress=False) gets nothing of this."""
    import time

    from prereg_kit.progress import progress_lines as _progress_lines
    from prereg_kit.simulate.dryrun import _note

    now = iter(range(0, 1000, 3))  # 3 fake seconds per call of the clock
    monkeypatch.setattr(time, "monotonic", lambda: next(now))
    assert list(_progress_lines(list(range(6)), "simulating studies")) == list(range(6))
    err = capsys.readouterr().err.splitlines()
    assert err == ["simulating studies: 2/6 (6 s)", "simulating studies: 4/6 (12 s)", "simulating studies: 6/6 (18 s)"]
    _note(None, "dry run: analyzing")
    _note(False, "not shown")
    assert capsys.readouterr().err == "dry run: analyzing\n"


def test_make_demo_prints_the_report_line_once():
    """`prereg analyze` prints `report: DIR/report/report.md (N files)` itself; the make targets
    that end with it must not echo a second report line."""
    import subprocess

    for target in ("demo", "trl-example"):
        res = subprocess.run(["make", "-n", "-o", ".make-installed", target], cwd=ROOT, capture_output=True, text=True, check=True)
        lines = res.stdout.splitlines()
        assert any(" analyze " in f" {ln} " for ln in lines), lines
        assert not [ln for ln in lines if ln.lstrip().startswith("echo") and "report:" in ln], (target, lines)
