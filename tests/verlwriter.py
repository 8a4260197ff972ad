"""verl runs written by verl 0.9.1's own writer code, and by hand where a detail must vary.

verl 0.9.1 cannot be installed with its dependencies here (it pins transformers<5.11), and
``import verl`` pulls in ray, torch and tensordict through ``verl/__init__.py``; the writers need
none of them. So its source is installed apart (``make install``: ``pip install --no-deps --target
build/verl-0.9.1 verl==0.9.1``; its wheel also carries a top-level ``tests`` package that would
shadow this project's ``tests``) and the writer code is loaded from those files:

- ``verl/utils/tracking.py`` as a module (``Tracking``, whose ``file`` backend is ``FileLogger``:
  ``{"step": N, "data": {...}}`` lines written with orjson ``OPT_SERIALIZE_NUMPY``, the file
  opened "wb"); it imports only orjson and packaging at module level;
- ``RayPPOTrainer._write_generations`` (``verl/trainer/ppo/ray_trainer.py``) and
  ``PPOTrainer._write_generations`` (``verl/trainer/ppo/v1/trainer_base.py``, the V1 trainer):
  static methods whose modules import torch, ray and omegaconf, so the function alone is taken
  from the file's syntax tree (``ast``) and run with the modules it uses (json, os, numpy).

:func:`write_fit` calls them as ``RayPPOTrainer.fit`` of verl 0.9.1 does (ray_trainer.py,
``fit``): a validation before training at step 0 when ``trainer.val_before_train``; steps 1..n,
each logged once with the metrics of ``compute_data_metrics``, ``compute_timing_metrics`` and
``compute_throughout_metrics`` (``verl/trainer/ppo/metric_utils.py``) in the types verl's code
gives them: Python floats from ``tensor.item()`` (float32 values), a Python int
``perf/total_num_tokens`` (the sum of ``global_token_num``), numpy ints and floats from the agent
loop's timing (``verl/experimental/agent_loop/agent_loop.py``, ``_performance_metrics``) and
``reduce_metrics``; a validation after every ``test_freq``-th and the last step, its metrics in
that step's line and its dump ``<step>.jsonl``. A crashed and resumed run: the second attempt
loads the last checkpoint (``save_freq``), logs its validation at the checkpoint's step, and trains
from the step after it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
from paths import ROOT

VERL_VERSION = "0.9.1"
VERL_TARGET = ROOT / "build" / f"verl-{VERL_VERSION}"
INSTALL = f"python3 -m pip install --no-deps --target build/verl-{VERL_VERSION} verl=={VERL_VERSION}"
PROBLEMS = [(f"What is {k} + {k}?", str(2 * k)) for k in range(1, 7)]
VAL_N = 2  # actor_rollout_ref.rollout.val_kwargs.n: outputs per problem in a validation


def verl_source() -> Path | None:
    """The folder of verl 0.9.1's package (``verl/``) if its source is here, else None."""
    candidates = [VERL_TARGET / "verl"]
    spec = importlib.util.find_spec("verl")  # a top-level package's spec does not run its __init__
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) for p in spec.submodule_search_locations]
    for d in candidates:
        version = d / "version" / "version"
        if version.is_file() and version.read_text().strip() == VERL_VERSION:
            return d
    return None


SKIP_REASON = f"verl {VERL_VERSION}'s source is not here ({INSTALL}, as make install does) or orjson is missing"


def verl_ready() -> bool:
    return verl_source() is not None and importlib.util.find_spec("orjson") is not None


@cache
def tracking():
    """verl's ``verl/utils/tracking.py`` as a module, without ``verl/__init__.py``."""
    spec = importlib.util.spec_from_file_location("verl_0_9_1_tracking", verl_source() / "utils" / "tracking.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@cache
def write_generations(trainer: str = "v0") -> Callable:
    """The static method ``_write_generations`` of ``RayPPOTrainer`` (``v0``, ray_trainer.py) or
    of the V1 ``PPOTrainer`` (``v1``, v1/trainer_base.py), compiled from verl's own source."""
    rel, cls = {"v0": ("trainer/ppo/ray_trainer.py", "RayPPOTrainer"),
                "v1": ("trainer/ppo/v1/trainer_base.py", "PPOTrainer")}[trainer]
    path = verl_source() / rel
    tree = ast.parse(path.read_text(), filename=str(path))
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "_write_generations")
    fn.decorator_list = []  # @staticmethod: a plain function once outside the class
    module = ast.Module(body=[fn], type_ignores=[])
    namespace = {"json": json, "os": os, "np": np, "print": lambda *a, **k: None}
    exec(compile(module, str(path), "exec"), namespace)  # verl's own function, from its file
    return namespace["_write_generations"]


@contextmanager
def file_logger_path(path: Path):
    """``VERL_FILE_LOGGER_PATH`` set for the block (FileLogger reads it when it is made)."""
    old = os.environ.get("VERL_FILE_LOGGER_PATH")
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("VERL_FILE_LOGGER_PATH", None)
        else:
            os.environ["VERL_FILE_LOGGER_PATH"] = old


def f32(x: float) -> float:
    """What ``torch.mean(...).item()`` returns for a float32 tensor: a Python float of float32 precision."""
    return float(np.float32(x))


@dataclass
class Fit:
    """One verl run as ``RayPPOTrainer.fit`` drives it (see the module docstring)."""

    steps: int = 10
    batch: int = 4  # data.train_batch_size (prompts a step)
    n: int = 2  # actor_rollout_ref.rollout.n
    mini: int = 2  # actor_rollout_ref.actor.ppo_mini_batch_size
    step_tokens: int = 400  # response tokens a step (the responses' lengths vary around it)
    val_before_train: bool = True
    test_freq: int = 5
    save_freq: int = 5
    correct: Callable[[int], int] = lambda step: 6  # correct outputs (of 12) in the validation after `step` steps
    seed: int = 0
    trainer: str = "v0"  # whose _write_generations writes the dumps (v0: RayPPOTrainer, v1: the V1 trainer)
    crash_after: int | None = None  # the first attempt dies after this step; a second resumes from its checkpoint
    same_file: bool = False  # the second attempt logs into the first one's file (FileLogger empties it)
    nan_grad_norm_at: int | None = 3  # actor/grad_norm is NaN at this step (bf16 overflow): verl writes null
    critic_warmup: int = 0  # trainer.critic_warmup: no actor update (nor its timer) before this step
    # written by hand (json.dumps, not verl's code) to vary what verl's writer never varies:
    hand: bool = False
    floats: bool = False  # integer metrics written as floats (30798.0), as a logger without orjson writes them
    drop: tuple[str, ...] = ()  # metrics left out of every training line
    null: tuple[str, ...] = ()  # metrics written as null (NaN through orjson)
    nan: tuple[str, ...] = ()  # metrics written as NaN (Python's json writes the literal)
    response_lengths: dict[int, list[int]] = field(default_factory=dict)  # filled: the final lineage's lengths

    def config(self) -> dict:
        return {"data": {"train_batch_size": self.batch, "max_prompt_length": 64, "max_response_length": 128},
                "actor_rollout_ref": {"rollout": {"n": self.n, "name": "vllm", "val_kwargs": {"n": VAL_N}},
                                      "actor": {"ppo_mini_batch_size": self.mini, "ppo_epochs": 1}},
                "algorithm": {"adv_estimator": "grpo", "filter_groups": {"enable": False}},
                "trainer": {"test_freq": self.test_freq, "save_freq": self.save_freq, "val_before_train": self.val_before_train,
                            "validation_data_dir": "val", "logger": ["console", "file"], "critic_warmup": self.critic_warmup,
                            "total_training_steps": self.steps, "use_v1": self.trainer == "v1",
                            "v1": {"trainer_mode": "sync", "sync": {}}}}


def _lengths(rng: np.random.Generator, k: int, total: int) -> list[int]:
    """k response lengths that vary and sum to ``total`` (every step generates the same tokens)."""
    d = rng.integers(-20, 21, size=k // 2)
    return [int(x) for x in np.concatenate([total // k + d, total // k - d])] if k % 2 == 0 else [total // k] * k


def _validate(fit: Fit, step: int, val_dir: Path, rng: np.random.Generator) -> dict:
    """A validation after ``step`` steps: its dump through verl's writer, and its metrics."""
    k = fit.correct(step)
    inputs, outputs, gts, scores = [], [], [], []
    for q, a in PROBLEMS:
        for _ in range(VAL_N):
            ok = len(outputs) < k
            inputs.append(f"system\nPlease reason step by step.\nuser\n{q}\nassistant\n")
            outputs.append(f"{q[8:-1]} makes {a}, so the answer is \\boxed{{{a}}}" if ok else "I think it is 7.")
            gts.append(a)
            scores.append(1.0 if ok else 0.0)
    extra = {"reward": list(scores), "acc": [s == 1.0 for s in scores]}
    if fit.trainer == "v1":  # the V1 trainer adds each sample's uid: <prompt uid>_<sample>_<turn>
        extra["uid"] = [f"{uuid.UUID(int=int(rng.integers(2**62)))}_{i % VAL_N}_0" for i in range(len(inputs))]
    if fit.hand:  # ray_trainer.py _write_generations: input, output, gts, score, step, then the extra keys
        val_dir.mkdir(parents=True, exist_ok=True)
        (val_dir / f"{step}.jsonl").write_text("".join(
            json.dumps({"input": i, "output": o, "gts": g, "score": sc, "step": step, "reward": sc}, ensure_ascii=False) + "\n"
            for i, o, g, sc in zip(inputs, outputs, gts, scores)))
    else:
        write_generations(fit.trainer)(inputs, outputs, gts, scores, extra, str(val_dir), step)
    acc = np.asarray(scores, dtype=np.float64)
    return {"val-core/openai/gsm8k/reward/mean@2": np.mean(acc), "val-aux/openai/gsm8k/reward/std@2": np.std(acc),
            "val-aux/openai/gsm8k/reward/best@2/mean": np.float64(1.0), "val-aux/num_turns/min": np.int64(2)}


def _step_metrics(fit: Fit, step: int, rng: np.random.Generator) -> dict:
    """The training metrics of one step, in verl's types (see the module docstring)."""
    k = fit.batch * fit.n
    resp = _lengths(rng, k, fit.step_tokens)
    prompt = [int(x) for x in rng.integers(15, 30, size=k)]
    fit.response_lengths[step] = resp
    timing = {"gen": 1.5 + 0.1 * rng.random(), "reward": 0.05, "old_log_prob": 0.2, "ref": 0.2, "adv": 0.01,
              "update_actor": 0.9, "update_weights": 0.12}
    if step < fit.critic_warmup:  # fit(): `if critic_warmup > global_steps`: the critic only; no update_actor timer
        del timing["update_actor"], timing["update_weights"]
    if fit.save_freq > 0 and (step == fit.steps or step % fit.save_freq == 0):
        timing["save_checkpoint"] = 4.0
    agent = {"agent_loop/num_preempted/min": np.int64(0), "agent_loop/num_preempted/max": np.int64(1),
             "agent_loop/generate_sequences/mean": np.float64(1.2), "agent_loop/slowest/num_preempted": np.int64(0)}
    timing_raw = {**timing, **agent, "step": sum(timing.values())}
    num_overall = sum(prompt) + sum(resp)
    return {
        "actor/entropy": f32(1.2), "perf/mfu/actor_infer": 0.0,
        "actor/pg_loss": np.float64(0.01), "actor/grad_norm": np.float64("nan") if step == fit.nan_grad_norm_at else np.float64(0.4),
        "actor/lr": 1e-6, "training/global_step": step, "training/epoch": 0,
        "critic/score/mean": f32(rng.random()), "critic/rewards/mean": f32(rng.random()),
        "critic/advantages/mean": f32(0.0), "critic/returns/mean": f32(0.0),
        "response_length/mean": f32(np.mean(resp)), "response_length/max": float(max(resp)),
        "response_length/min": float(min(resp)), "response_length/clip_ratio": f32(0.0),
        "response/aborted_ratio": f32(0.0), "prompt_length/mean": f32(np.mean(prompt)),
        "prompt_length/max": float(max(prompt)), "prompt_length/clip_ratio": f32(0.0),
        "num_turns/min": np.int64(2), "num_turns/max": np.int64(2), "num_turns/mean": np.float64(2.0),
        **{f"timing_s/{name}": v for name, v in timing_raw.items()},
        "timing_per_token_ms/gen": timing["gen"] * 1000 / sum(resp),
        **({"timing_per_token_ms/update_actor": timing["update_actor"] * 1000 / num_overall} if "update_actor" in timing else {}),
        "perf/total_num_tokens": num_overall, "perf/time_per_step": timing_raw["step"],
        "perf/throughput": num_overall / timing_raw["step"],
    }


class HandLogger:
    """FileLogger's lines written with Python's json and the knobs of :class:`Fit` (``hand``):
    like ``FileLogger`` it empties its file when made, and writes ``{"step": N, "data": {...}}``."""

    def __init__(self, path: Path, fit: Fit):
        self.fit, self.fh = fit, open(path, "w")  # closed by finish(), as FileLogger does

    def log(self, data: dict, step: int) -> None:
        out = {}
        for k, v in data.items():
            v = v.item() if isinstance(v, np.generic) else v
            if k in self.fit.drop:
                continue
            if k in self.fit.null:
                v = None
            elif k in self.fit.nan:
                v = float("nan")
            elif self.fit.floats and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            elif isinstance(v, float) and math.isnan(v):
                v = None  # orjson's NaN
            out[k] = v
        self.fh.write(json.dumps({"step": step, "data": out}) + "\n")

    def finish(self) -> None:
        self.fh.close()


def _attempt(fit: Fit, log: Path, val_dir: Path, rng: np.random.Generator, start: int, stop: int) -> None:
    """One run of ``fit()``: from the checkpoint of step ``start`` (0: none) to step ``stop``."""
    if fit.hand:
        logger = HandLogger(log, fit)
    else:
        with file_logger_path(log):
            logger = tracking().Tracking(project_name="prereg", experiment_name=f"seed{fit.seed}", default_backend="file")
    if fit.val_before_train:
        logger.log(data=_validate(fit, start, val_dir, rng), step=start)
    for step in range(start + 1, stop + 1):
        metrics = _step_metrics(fit, step, rng)
        if fit.test_freq > 0 and (step == fit.steps or step % fit.test_freq == 0):
            metrics.update(_validate(fit, step, val_dir, rng))
            metrics["timing_s/testing"] = 2.0  # timed outside the step timer, logged with it
        logger.log(data=metrics, step=step)
    logger.finish()


def write_fit(folder: Path, fit: Fit) -> dict:
    """A verl run in ``folder``: ``logs`` (the file logger's file of each attempt, in order),
    ``val`` (the validation dumps), ``config`` (hydra's resolved config.yaml)."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(fit.seed)
    val_dir = folder / "val"
    logs = [folder / "metrics.jsonl"]
    if fit.crash_after is None:
        _attempt(fit, logs[0], val_dir, rng, 0, fit.steps)
    else:
        _attempt(fit, logs[0], val_dir, rng, 0, fit.crash_after)
        checkpoint = fit.crash_after // fit.save_freq * fit.save_freq
        logs.append(logs[0] if fit.same_file else folder / "metrics-resumed.jsonl")
        _attempt(fit, logs[1], val_dir, rng, checkpoint, fit.steps)
    (folder / "config.yaml").write_text(yaml.safe_dump(fit.config()))
    return {"logs": list(dict.fromkeys(logs)), "val": val_dir, "config": folder / "config.yaml"}
