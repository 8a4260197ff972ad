"""Tracker files written by the trackers themselves, the way each trainer's logger calls them.

- W&B: real runs, written by wandb (``wandb.init(mode="offline")``) in a child process (one per
  batch of runs: wandb's service and its global state stay out of the test process; the first
  run of a batch takes about half a second, each further one a few hundredths).
- TensorBoard: torch's ``SummaryWriter``; MLflow: mlflow (file store; SQLite in the slow tests).

Each writer follows one logger line by line, cited by file and version: verl 0.9.1
``verl/utils/tracking.py`` (``Tracking``, ``_TensorboardAdapter``, ``_MlflowLoggingAdapter``),
transformers 5.24 ``integrations/integration_utils.py`` (``rewrite_logs``, ``TensorBoardCallback``,
``WandbCallback``, ``MLflowCallback``), OpenRLHF 0.11.2 ``openrlhf/utils/logging_utils.py``
(``WandbLogger``, ``TensorboardLogger``). Where the tool itself is installed, tests run it too
and compare (test_import_trackers.py).

Run as a script (``python trackerfiles.py SPEC.json``) it writes the W&B runs of a spec.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# ---------------------------------------------------------------------------------------------
# W&B: a spec is a list of runs {"dir", "id", "config", "define_metric": [[name, kwargs]],
# "logs": [[data, step or null]], "verl": bool}; written by `write_wandb` in a child process.


def verl_wandb(folder: Path, run_id: str, steps: dict[int, dict], config: dict | None = None) -> dict:
    """verl 0.9.1 ``Tracking`` with the wandb backend: ``wandb.init(project, name, entity, config)``,
    then ``wandb.log(data=data, step=step)`` per training step."""
    return {"dir": str(folder), "id": run_id, "config": config or {}, "logs": [[d, s] for s, d in steps.items()]}


def rewrite_logs(d: dict) -> dict:
    """transformers 5.24 ``rewrite_logs``: ``eval_x`` → ``eval/x``, ``test_x`` → ``test/x``, else ``train/x``."""
    out = {}
    for k, v in d.items():
        if k.startswith("eval_"):
            out["eval/" + k[5:]] = v
        elif k.startswith("test_"):
            out["test/" + k[5:]] = v
        else:
            out["train/" + k] = v
    return out


def hf_wandb(folder: Path, run_id: str, logs: list[tuple[int, dict]]) -> dict:
    """transformers 5.24 ``WandbCallback``: ``define_metric("train/global_step")``, ``define_metric("*",
    step_metric="train/global_step", step_sync=True)``; ``on_log``: ``wandb.log({**rewrite_logs(logs),
    "train/global_step": state.global_step})`` (no explicit step: each call is a commit)."""
    return {"dir": str(folder), "id": run_id, "config": {},
            "define_metric": [["train/global_step", {}], ["*", {"step_metric": "train/global_step", "step_sync": True}]],
            "logs": [[{**rewrite_logs(d), "train/global_step": s}, None] for s, d in logs]}


def openrlhf_wandb(folder: Path, run_id: str, calls: list[tuple[str, int, dict]]) -> dict:
    """OpenRLHF 0.11.2 ``WandbLogger``: step metrics ``train/global_step`` and ``eval/epoch``;
    ``log_train`` / ``log_eval`` (``calls``: ("train" or "eval", global_step, metrics) in call order):
    ``{"train/%s" % k: v for k, v in {**metrics, "global_step": global_step}.items()}``, None values dropped."""
    logs = [[{f"{kind}/{k}": v for k, v in {**{k: v for k, v in m.items() if v is not None}, "global_step": s}.items()}, None]
            for kind, s, m in calls]
    return {"dir": str(folder), "id": run_id, "config": {},
            "define_metric": [["train/global_step", {}], ["train/*", {"step_metric": "train/global_step", "step_sync": True}],
                              ["eval/epoch", {}], ["eval/*", {"step_metric": "eval/epoch", "step_sync": True}]],
            "logs": logs}


def write_wandb(runs: list[dict], spec: Path) -> None:
    """Write W&B offline runs with wandb itself, in a child process."""
    pytest.importorskip("wandb", reason="W&B run files are written by wandb (pip install 'prereg-kit[wandb]')")
    spec.write_text(json.dumps(runs))
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
    res = subprocess.run([sys.executable, __file__, str(spec)], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-3000:]


_BATCHES: dict[str, object] = {}  # name -> build(folder) -> runs; registered when a test module is imported
_WRITTEN: dict[str, Path] = {}
# The tests that read runs of wandb_folder: one xdist group, so that one worker's child process
# writes every batch (a worker writes them all at its first use; wandb's start-up is most of it).
WANDB_RUNS = pytest.mark.xdist_group("wandb-runs")


def wandb_batch(name: str, build) -> None:
    """Register the W&B runs a test module needs (``build(folder)`` → run specs): every module's
    batch is written together, in one child process, the first time one of them is asked for."""
    _BATCHES[name] = build


def wandb_folder(tmp_path_factory, name: str) -> Path:
    """The folder of batch ``name``'s runs, written (with every batch registered but not yet written) on first use."""
    if name not in _WRITTEN:
        root = tmp_path_factory.mktemp("wandb-runs")
        todo = [n for n in _BATCHES if n not in _WRITTEN]
        write_wandb([run for n in todo for run in _BATCHES[n](root / n)], root / "spec.json")
        _WRITTEN.update({n: root / n for n in todo})
    return _WRITTEN[name]


def _write_wandb_runs(spec: Path) -> None:
    import wandb

    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, x_disable_meta=True, disable_git=True,
                              save_code=False, x_save_requirements=False, disable_job_creation=True)
    for run in json.loads(spec.read_text()):
        Path(run["dir"]).mkdir(parents=True, exist_ok=True)
        if run.get("verl"):
            tracking = verl_tracking_module()
            init = wandb.init
            # where a user sets WANDB_DIR and WANDB_RUN_ID (read once per process, so given here)
            wandb.init = lambda init=init, run=run, **kw: init(**kw, dir=run["dir"], id=run["id"], mode="offline")
            try:
                t = tracking.Tracking("prereg-tests", run["id"], default_backend="wandb", config=run["config"])
                for data, step in run["logs"]:
                    t.log(data, step)
                t.finish()
            finally:
                wandb.init = init
            continue
        r = wandb.init(mode="offline", dir=run["dir"], project="prereg-tests", id=run["id"], config=run["config"],
                       resume="allow" if run.get("resume") else None, settings=settings)
        for name, kw in run.get("define_metric", []):
            r.define_metric(name, **kw)
        for data, step in run["logs"]:
            r.log(data, step=step) if step is not None else r.log(data)
        r.finish()


def run_file(folder: Path) -> Path:
    """The one ``run-<id>.wandb`` below ``folder``."""
    (found,) = (p for p in Path(folder).glob("wandb/*/run-*.wandb") if not p.parent.is_symlink())  # not wandb/latest-run
    return found


# ---------------------------------------------------------------------------------------------
# TensorBoard


def _writer(folder: Path, **kw):
    return pytest.importorskip("torch.utils.tensorboard", reason="TensorBoard files are written by torch's SummaryWriter"
                               ).SummaryWriter(str(folder), **kw)


def verl_tensorboard(folder: Path, steps: dict[int, dict], **writer) -> Path:
    """verl 0.9.1 ``_TensorboardAdapter``: ``SummaryWriter(tensorboard_dir)``; ``log(data, step)``:
    ``add_scalar(key, data[key], step)`` per key; ``finish``: ``close()``. ``writer``: e.g.
    ``purge_step`` (a restart the run's own code marks)."""
    w = _writer(folder, **writer)
    for step, data in steps.items():
        for key in data:
            w.add_scalar(key, data[key], step)
    w.close()
    return folder


def hf_tensorboard(folder: Path, logs: list[tuple[int, dict]]) -> Path:
    """transformers 5.24 ``TensorBoardCallback``: ``on_train_begin`` adds the text ``args``;
    ``on_log``: ``rewrite_logs``, then ``add_scalar(k, v, state.global_step)`` for int or float,
    ``add_text`` for str, ``flush()``; ``on_train_end``: ``close()``."""
    w = _writer(folder)
    w.add_text("args", json.dumps({"logging_steps": 1}))
    for step, d in logs:
        for k, v in rewrite_logs(d).items():
            if isinstance(v, (int, float)):
                w.add_scalar(k, v, step)
            elif isinstance(v, str):
                w.add_text(k, v, step)
        w.flush()
    w.close()
    return folder


def openrlhf_tensorboard(folder: Path, train: list[tuple[int, dict]], evals: list[tuple[int, dict]] = ()) -> Path:
    """OpenRLHF 0.11.2 ``TensorboardLogger``: ``log_train``: ``generated_samples`` as text, every
    other non-None value ``add_scalar(f"train/{k}", v, global_step)``; ``log_eval``: ``eval/{k}``."""
    w = _writer(folder)
    for step, d in train:
        for k, v in d.items():
            if k == "generated_samples" and v is not None:
                text, reward = v
                w.add_text("train/generated_samples", f"Sample:\\n{text}\\n\\nReward: {reward:.4f}", step)
            elif v is not None:
                w.add_scalar(f"train/{k}", v, step)
    for step, d in evals:
        for k, v in d.items():
            if v is not None:
                w.add_scalar(f"eval/{k}", v, step)
    w.close()
    return folder


# ---------------------------------------------------------------------------------------------
# MLflow


def _mlflow(uri: str):
    mlflow = pytest.importorskip("mlflow", reason="MLflow stores are written by mlflow (mlflow-skinny, the dev extra)")
    mlflow.set_tracking_uri(uri)
    return mlflow


def _file_store(root: Path) -> str:
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3.x keeps the file store in maintenance mode
    return f"file://{root}"


def verl_sanitize(key: str) -> str:
    """verl 0.9.1 ``_MlflowLoggingAdapter._sanitize_key``: ``@`` → ``_at_``, ``/+`` → ``/``, then
    every character but ``[/\\w.\\- :]`` → ``_``."""
    return re.sub(r"[^/\w.\- :]", "_", re.sub(r"/+", "/", key.replace("@", "_at_")))


def verl_params(config: dict) -> dict:
    """verl 0.9.1 ``_compute_mlflow_params_from_objects``: lists become ``{"list_len": n, "0": ...}``,
    then ``pd.json_normalize(..., sep="/")``."""
    def flat(x, prefix=""):
        if isinstance(x, list):
            x = {"list_len": len(x)} | {str(i): v for i, v in enumerate(x)}
        if isinstance(x, dict):
            return {k: v for key, val in x.items() for k, v in flat(val, f"{prefix}{key}/").items()}
        return {prefix[:-1]: x}
    return flat(config)


def verl_mlflow(uri: str, steps: dict[int, dict], *, config: dict | None = None, project: str = "p", name: str = "e",
                run_id: str | None = None) -> str:
    """verl 0.9.1 ``Tracking`` with the mlflow backend: ``set_tracking_uri``, ``set_experiment(project)``,
    ``start_run(run_name=experiment)`` (``start_run(run_id=MLFLOW_RUN_ID)`` when that is set: ``run_id``,
    a resumed run), ``log_params`` of the flattened config; ``log_metrics`` of the sanitized keys
    with ``step``; ``end_run``. Returns the run id."""
    mlflow = _mlflow(uri)
    try:
        if run_id is None:
            mlflow.set_experiment(project)
        with mlflow.start_run(run_id=run_id) if run_id else mlflow.start_run(run_name=name) as run:
            mlflow.log_params(verl_params(config or {"actor": {"lr": 1e-6}}))
            for step, data in steps.items():
                mlflow.log_metrics(metrics={verl_sanitize(k): v for k, v in data.items()}, step=step)
    finally:
        mlflow.set_tracking_uri(None)
    return run.info.run_id


def hf_mlflow(uri: str, logs: list[tuple[int, dict]], params: dict | None = None) -> str:
    """transformers 5.24 ``MLflowCallback.on_log``: int and float values only, every character but
    ``[0-9A-Za-z_\\-.\\ :/]`` → ``_`` (``@`` too), ``log_metrics(..., step=state.global_step)``; no ``train/`` prefix."""
    mlflow = _mlflow(uri)
    try:
        mlflow.set_experiment("hf")
        with mlflow.start_run() as run:
            mlflow.log_params(params or {"learning_rate": 1e-6, "logging_steps": 1})
            for step, d in logs:
                metrics = {k: v for k, v in d.items() if isinstance(v, (int, float))}
                mlflow.log_metrics(metrics={re.sub(r"[^0-9A-Za-z_\-\.\ :/]", "_", k): v for k, v in metrics.items()}, step=step)
    finally:
        mlflow.set_tracking_uri(None)
    return run.info.run_id


def file_store(root: Path) -> str:
    """An MLflow file-store URI under ``root`` (MLflow 3.x writes it only when allowed)."""
    return _file_store(root)


# ---------------------------------------------------------------------------------------------
# verl's own tracking module, where verl is installed


def verl_tracking_module():
    """verl's ``verl/utils/tracking.py`` loaded by file (tests/verlwriter.py: it needs only orjson
    and packaging, while verl's package ``__init__`` needs its GPU stack). Skips without verl."""
    from verlwriter import SKIP_REASON, tracking, verl_ready

    if not verl_ready():
        pytest.skip(SKIP_REASON)
    return tracking()


if __name__ == "__main__":
    _write_wandb_runs(Path(sys.argv[1]))
