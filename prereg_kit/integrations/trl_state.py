"""TRL's ``trainer_state.json`` (after training with ``GRPOTrainer``), as an :class:`ImportedRun`.

``transformers.Trainer.save_state`` writes ``trainer_state.json`` with ``global_step`` and
``log_history``: one dict per logging event, ``{"step", "epoch", "loss", "reward",
"completions/mean_length", "num_tokens", ...}`` for training steps, ``eval_*`` keys for TRL's own
evaluation, and a last dict with ``train_runtime``. The mapping (paper 1 §2.2: compute in
generated tokens of every kind and in training seconds):

- an iteration is one optimizer step (TRL generates one global batch per step when
  ``num_iterations = 1`` and ``steps_per_generation`` equals ``gradient_accumulation_steps``,
  TRL's defaults); every step must be in ``log_history`` (``logging_steps = 1``), else the dropped
  steps' tokens would be missing;
- generated tokens = ``completions/mean_length`` x completions per step (the global batch:
  ``per_device_train_batch_size x world_size x gradient_accumulation_steps``). TRL's
  ``num_tokens`` counts prompts too: it is kept as the cross-check column ``num_tokens``;
- seconds: TRL does not split stages; ``step_time`` (logged by TRL versions that time the step)
  becomes the unsplit ``seconds_step``. Without it the import is refused: ``train_runtime``
  covers the whole run, evaluation and saving included;
- evaluations: TRL's ``eval_*`` rewards are its reward functions', not our verifiers'; give the
  evaluation outputs (``--evaluations``: step, problem_id or input, output, answer per line) to
  have them re-scored (:func:`.rescore.read_outputs`), or use :class:`PreregCallback` live.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pandas as pd

from ..errors import PreregError
from .importing import ImportedRun, file_record, iterations_from_lengths
from .rescore import outputs_evaluations

STATE_FILE = "trainer_state.json"
LENGTH, TIME = "completions/mean_length", "step_time"
OPTIONAL = {"reward_mean": "reward", "truncation_rate": "completions/clipped_ratio", "num_tokens": "num_tokens",
            "loss": "loss", "frac_reward_zero_std": "frac_reward_zero_std"}
KEY_MAP = {"tokens_rollout": f"{LENGTH} x completions per step", "seconds_step": TIME, "updates": "step",
           **{k: v for k, v in OPTIONAL.items() if k in ("reward_mean", "truncation_rate")}}


def completions_from_args(args: dict, where: str) -> int:
    """Completions a step generates, from TRL's arguments (GRPOConfig as a dict)."""
    if int(args.get("num_iterations", 1) or 1) != 1:
        raise PreregError(f"{where}: num_iterations = {args['num_iterations']}: a generation batch is reused for several "
                          "steps, so a step's completions are not its generated tokens")
    spg, gas = args.get("steps_per_generation"), args.get("gradient_accumulation_steps", 1)
    if spg not in (None, gas):
        raise PreregError(f"{where}: steps_per_generation = {spg} differs from gradient_accumulation_steps = {gas}: "
                          "generation and optimizer steps are not one to one")
    if int(args.get("logging_steps", 1) or 1) != 1:
        raise PreregError(f"{where}: logging_steps = {args['logging_steps']}: TRL then logs every "
                          f"{args['logging_steps']}th step and the others' tokens are not in trainer_state.json")
    try:
        return int(args["per_device_train_batch_size"]) * int(args.get("world_size", 1)) * int(gas)
    except (KeyError, TypeError, ValueError):
        raise PreregError(f"{where}: per_device_train_batch_size (and world_size, gradient_accumulation_steps) needed "
                          "for the completions per step (or give --completions-per-step)") from None


def read_log_history(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """The training entries of ``log_history`` (a ``step`` and a ``line`` = entry number column)
    and the whole state. Evaluation and summary entries are left out."""
    p = Path(path)
    try:
        state = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PreregError(f"{p}: not JSON ({e})") from None
    hist = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(hist, list):
        raise PreregError(f"{p}: key 'log_history' missing or not a list (is this TRL's {STATE_FILE}?)")
    rows, seen = [], {}
    for i, e in enumerate(hist):
        if not isinstance(e, dict) or not isinstance(e.get("step"), int):
            raise PreregError(f"{p}: log_history[{i}]: expected an entry with an integer 'step'")
        if "train_runtime" in e or any(k.startswith("eval_") for k in e) or LENGTH not in e:
            continue
        if e["step"] in seen:
            raise PreregError(f"{p}: log_history[{i}]: step {e['step']} logged again (first at log_history[{seen[e['step']]}])")
        seen[e["step"]] = i
        rows.append({**e, "line": f"log_history[{i}]"})
    return pd.DataFrame(rows), state


def import_trl_state(path: str | Path, *, completions_per_step: int | None = None, args: str | Path | dict | None = None,
                     evaluations: str | Path | None = None, eval_set: str | None = None, eval_seed: int | None = None,
                     started_at: datetime | None = None, ended_at: datetime | None = None, trainer: str = "trl",
                     device: str = "unknown") -> ImportedRun:
    """Read ``trainer_state.json`` (``path``: the file or the folder holding it); ``args``: TRL's
    arguments as JSON or a dict; ``evaluations``: evaluation outputs to re-score."""
    p = Path(path)
    p = p / STATE_FILE if p.is_dir() else p
    args_path = Path(args) if isinstance(args, (str, Path)) else None
    cfg = json.loads(args_path.read_text()) if args_path else dict(args or {})
    where_args = str(args_path) if args_path else "--args"
    if cfg:
        from_args = completions_from_args(cfg, where_args)
        if completions_per_step is not None and completions_per_step != from_args:
            raise PreregError(f"--completions-per-step {completions_per_step} contradicts {where_args} ({from_args})")
        completions_per_step = from_args
    if completions_per_step is None:
        raise PreregError(f"{p}: the completions per step are not in {STATE_FILE}: give --completions-per-step "
                          "(per_device_train_batch_size x processes x gradient_accumulation_steps) or --args")
    steps, state = read_log_history(p)
    if len(steps) and TIME not in steps.columns:
        raise PreregError(f"{p}: no per-step time ({TIME!r}) in log_history: train_runtime covers the whole run, evaluation "
                          "and saving included, so training seconds cannot be read (train with PreregCallback instead)")
    if not len(steps):
        raise PreregError(f"{p}: no training step in log_history has {LENGTH!r}")
    iterations = iterations_from_lengths(steps, where=str(p), length_key=LENGTH, responses_per_step=completions_per_step,
                                         seconds_key=TIME, updates_per_step=1, optional=OPTIONAL)
    if "num_tokens" in iterations.columns:
        # num_tokens is cumulative prompt + completion tokens: each step's increase is at least its completions
        inc = iterations["num_tokens"].diff().fillna(iterations["num_tokens"]).to_numpy()
        short = (inc < iterations["tokens_rollout"].to_numpy() - 0.5).nonzero()[0]
        if short.size:
            i = int(short[0])
            raise PreregError(f"{p}: step {i + 1}: num_tokens grew by {inc[i]:.0f} but completions/mean_length x "
                              f"{completions_per_step} completions is {iterations['tokens_rollout'].iloc[i]}: the completions "
                              "per step are wrong")
    files = [file_record(p, p.parent)] + ([file_record(args_path, args_path.parent)] if args_path else [])
    ev, more = outputs_evaluations(evaluations, eval_set=eval_set, eval_seed=eval_seed)
    files += more
    # TRL times GRPOTrainer.training_step (generation, weight sync to vLLM, forward and backward of
    # every micro-step) but not the optimizer step that follows it (trl 1.16): an undercount, said
    notes = ["stages not split: seconds_step only (stage shares unavailable)",
             "seconds_step = TRL's step_time, which leaves out the optimizer step itself"]
    if eval_seed is None:
        notes.append("evaluation sampling seed not known")
    return ImportedRun(trainer=trainer, importer="trl-state", iterations=iterations, evaluations=ev, config=cfg,
                       source={"files": files, "key_map": KEY_MAP, "completions_per_step": completions_per_step,
                               "global_step": state.get("global_step"), "notes": notes},
                       started_at=started_at, ended_at=ended_at, device=device)


__all__ = ["KEY_MAP", "STATE_FILE", "completions_from_args", "import_trl_state", "read_log_history"]
