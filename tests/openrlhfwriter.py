"""OpenRLHF 0.11.2 histories: its own W&B logger code writing into an emulated W&B history, or a
hand-written history that follows its source where a detail must vary.

OpenRLHF's dependencies (deepspeed, vllm, ray ...) do not install here, and it writes no metrics
file of its own: ``PPOTrainer.fit`` (``openrlhf/trainer/ppo_trainer.py``) hands each step's
``status`` to ``WandbLogger.log_train`` (``openrlhf/utils/logging_utils.py``), which needs only the
standard library. ``make install`` installs the package apart (``pip install --no-deps --target
build/openrlhf-0.11.2 openrlhf==0.11.2``; its wheel carries a top-level ``tests`` package too) and
:func:`logging_utils` loads that one file. ``log_train`` is called on a logger whose ``handle`` is
:class:`History`, which keeps the rows W&B's history would: one row per ``wandb.log`` call with
``_step``, and, because OpenRLHF declares ``define_metric("train/*", step_metric=
"train/global_step", step_sync=True)``, the last ``train/global_step`` copied into a ``train/*``
row that lacks it (wandb 0.31, ``wandb/sdk/wandb_run.py``, ``define_metric``: "step_sync:
Automatically insert the last value of step_metric into run.log() if it is not provided
explicitly"). The history is then exported as JSON lines, row by row (``json.dumps`` of each
``run.scan_history()`` row) or through pandas (missing keys written as null, integer columns
with gaps as floats).

The ``status`` of a step is what ``BasePPOTrainer.train_step`` and ``PPOTrainer.fit`` build: the
actor's ``ppo_train`` means (``policy_loss``, ``actor_lr``, ``kl`` ...), ``timing/make_experience``,
``timing/ppo_train``, ``timing/broadcast``, ``_compute_rollout_stats`` (``rollout/reward_mean``,
``rollout/reward_std``, ``rollout/response_length_mean``, ``rollout/truncated_rate``,
``rollout/num_samples`` as a float), ``generated_samples`` ([text, reward]),
``timing/generation`` and ``timing/step_total`` = the sum of the ``timing/*`` keys.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

import pandas as pd
from paths import ROOT

OPENRLHF_VERSION = "0.11.2"
TARGET = ROOT / "build" / f"openrlhf-{OPENRLHF_VERSION}"
SKIP_REASON = (f"OpenRLHF {OPENRLHF_VERSION}'s source is not here (python3 -m pip install --no-deps --target "
               f"build/openrlhf-{OPENRLHF_VERSION} openrlhf=={OPENRLHF_VERSION}, as make install does)")


def openrlhf_ready() -> bool:
    meta = TARGET / f"openrlhf-{OPENRLHF_VERSION}.dist-info"
    return meta.is_dir() and (TARGET / "openrlhf" / "utils" / "logging_utils.py").is_file()


@cache
def logging_utils():
    """OpenRLHF's ``openrlhf/utils/logging_utils.py`` as a module, without ``openrlhf/__init__.py``."""
    spec = importlib.util.spec_from_file_location("openrlhf_0_11_2_logging_utils",
                                                  TARGET / "openrlhf" / "utils" / "logging_utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Table:
    """``wandb.Table``, as far as ``log_train`` uses it."""

    def __init__(self, columns, data=None):
        self.columns, self.data = list(columns), [list(r) for r in data or []]

    def add_data(self, *row):
        self.data.append(list(row))


class History:
    """The ``wandb`` module as ``WandbLogger`` calls it, keeping W&B's history rows."""

    Table = Table

    def __init__(self):
        self.rows, self.last_step = [], None

    def log(self, data: dict) -> None:
        row = {"_step": len(self.rows), "_runtime": 10.0 * len(self.rows), "_timestamp": 1.7e9 + 10 * len(self.rows)}
        for k, v in data.items():
            row[k] = ({"_type": "table-file", "path": f"media/table/{k}_{len(self.rows)}.table.json",
                       "ncols": len(v.columns), "nrows": len(v.data)} if isinstance(v, Table) else v)
        if "train/global_step" in data:
            self.last_step = data["train/global_step"]
        elif any(k.startswith("train/") for k in data) and self.last_step is not None:
            row["train/global_step"] = self.last_step  # step_sync
        self.rows.append(row)

    def export(self, path: Path, how: str = "rows") -> Path:
        """The history as JSON lines: ``rows`` (each row's own keys) or ``pandas`` (every column
        in every row, null where a row lacks it)."""
        if how == "rows":
            path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))
        else:
            pd.DataFrame(self.rows).to_json(path, orient="records", lines=True)
        return path


def status(step: int, *, samples: int = 16, length: float = 30.0, step_total: bool = True, extra: dict | None = None) -> dict:
    """The ``status`` dict ``PPOTrainer.fit`` logs for ``step`` (see the module docstring)."""
    s = {"policy_loss": 0.1, "actor_lr": 1e-6, "kl": 0.001, "actor_grad_norm": 0.5, "response_length": length,
         "timing/make_experience": 1.0, "timing/ppo_train": 0.9, "timing/broadcast": 0.1,
         "rollout/reward_mean": 0.4, "rollout/reward_std": 0.2, "rollout/response_length_mean": length,
         "rollout/truncated_rate": 0.0, "rollout/num_samples": float(samples),
         "generated_samples": [f"sample of step {step}", 0.5], "timing/generation": 2.0}
    if step_total:
        s["timing/step_total"] = sum(v for k, v in s.items() if k.startswith("timing/"))
    return s | (extra or {})


def wandb_history(steps: int = 6, *, eval_steps: int = 3, **kw) -> History:
    """OpenRLHF's ``WandbLogger`` (its own code) logging ``steps`` steps and an evaluation every
    ``eval_steps`` (``PPOTrainer.evaluate``: ``log_eval`` with pass@k aggregates)."""
    mod = logging_utils()
    logger = object.__new__(mod.WandbLogger)  # __init__ would call wandb.init
    logger.handle = History()
    logger.samples_table = Table(columns=["global_step", "text", "reward"])
    for step in range(1, steps + 1):
        logger.log_train(step, status(step, **kw))
        if step % eval_steps == 0:
            logger.log_eval(step, {"eval_math_pass4": 0.5, "eval_math_pass1": 0.3, "eval_num_samples": 24.0})
    return logger.handle


def hand_history(steps: int = 6, *, prefix: str = "train/", **kw) -> list[dict]:
    """The rows ``WandbLogger.log_train`` logs, written by hand: the table row, then the metrics
    row with every key as ``<prefix><key>`` and ``<prefix>global_step``."""
    rows = []
    for step in range(1, steps + 1):
        st = status(step, **kw)
        st.pop("generated_samples")
        rows.append({f"{prefix}{k}": v for k, v in {**st, "global_step": step}.items() if v is not None})
    return rows
