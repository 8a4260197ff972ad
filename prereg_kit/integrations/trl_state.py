"""TRL's ``trainer_state.json`` (after training with ``GRPOTrainer``), as an :class:`ImportedRun`.

What the file holds, as its writers write it (transformers 5.24, transformers/trainer_callback.py,
``TrainerState.save_to_json``: ``json.dumps(asdict(state), indent=2, sort_keys=True)``, so NaN
and infinities are written as ``NaN`` and ``Infinity``; transformers/trainer.py, ``Trainer.log``
appends ``{**logs, "step": global_step}`` to ``log_history``; TRL 1.16, trl/trainer/grpo_trainer.py,
``GRPOTrainer.log`` adds its metrics averaged since the last log, ``None`` where none was valid):

- ``global_step`` and ``logging_steps`` (the interval in steps); ``log_history``: one dict per
  logging event. A training entry carries ``loss``, ``grad_norm``, ``learning_rate``, ``entropy``,
  ``clip_ratio/*``, ``step_time`` (``GRPOTrainer.training_step``: seconds of one optimizer step's
  micro-steps), ``epoch``, ``step``; an entry of a step that generated also carries
  ``num_tokens`` (cumulative prompt + completion tokens), ``completions/mean_length``,
  ``completions/clipped_ratio`` (and min/max/terminated lengths), ``rewards/<function>/mean|std``,
  ``reward``, ``reward_std``, ``frac_reward_zero_std``. TRL's evaluation adds ``eval_*`` entries;
  the end of ``train()`` adds one with ``train_runtime``. A run resumed from a checkpoint starts
  from that checkpoint's ``log_history``, so a later state holds the whole run.
- TRL generates once every ``k = steps_per_generation x num_iterations / gradient_accumulation_steps``
  optimizer steps (1 with TRL's defaults); the entries of the other steps carry no completion metrics.

The mapping (dense-rewards paper §2.3 "Two budgets": compute in generated tokens and in training seconds):

- an iteration is one generation batch (``k`` optimizer steps, as ``PreregCallback`` counts it);
  every step must be in ``log_history`` (``logging_steps = 1``), else the dropped steps' tokens
  would be missing, and TRL would average the metrics over the logged interval;
- generated tokens = ``completions/mean_length`` x the completions of the generation batch
  (``generation_batch_size`` of ``--args``, else ``per_device_train_batch_size x world_size x
  steps_per_generation``, or ``--completions-per-step`` when ``k = 1``). TRL's ``num_tokens``
  counts prompts too: it is kept as the cross-check column ``num_tokens``;
- seconds: ``step_time`` summed over the batch's steps becomes the unsplit ``seconds_step``
  (``train_runtime`` covers the whole run, evaluation and saving included: no ``step_time``, no
  import);
- updates: the optimizer steps done (``step`` of the batch's last entry);
- evaluations: TRL's ``eval_*`` rewards are its reward functions', not our verifiers'; give the
  evaluation outputs (``--evaluations``: step, problem_id or input, output, answer per line) to
  have them re-scored (:func:`.rescore.read_outputs`), or use :class:`PreregCallback` live.

Every refusal names the file, the ``log_history`` entry, the key and the value as written.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import pandas as pd

from ..errors import PreregError
from .importing import ImportedRun, file_record, iterations_from_lengths
from .rescore import outputs_evaluations

STATE_FILE = "trainer_state.json"
LENGTH, TIME = "completions/mean_length", "step_time"
OPTIONAL = {"reward_mean": "reward", "truncation_rate": "completions/clipped_ratio", "num_tokens": "num_tokens",
            "loss": "loss", "frac_reward_zero_std": "frac_reward_zero_std"}
SIGNED = ("reward", "loss")  # keys that may be negative; the others are counts, seconds or fractions
KEY_MAP = {"tokens_rollout": f"{LENGTH} x completions per generation batch",
           "seconds_step": f"{TIME} summed over the generation batch's optimizer steps", "updates": "step",
           **{k: v for k, v in OPTIONAL.items() if k in ("reward_mean", "truncation_rate")}}


class Written(float):
    """A JSON number with its text as written in the file (refusals quote the file, not a repr)."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> Self:
        self = super().__new__(cls, float(text))
        self.text = text
        return self


def written(value: Any) -> str:
    """``value`` as the JSON file spells it."""
    if isinstance(value, Written):
        return value.text
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def read_json(path: Path, what: str) -> Any:
    """The JSON document in ``path``, numbers kept as written; a missing, empty, binary or
    malformed file is refused in one line naming it."""
    if not path.is_file():
        raise PreregError(f"{path}: no such file" if not path.exists() else f"{path}: a folder, not {what}")
    data = path.read_bytes()
    if not data.strip():
        raise PreregError(f"{path}: empty file, expected {what}")
    if b"\x00" in data:
        raise PreregError(f"{path}: binary content, not {what}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PreregError(f"{path}: not UTF-8 text (byte {e.start}), expected {what}") from None
    try:
        return json.loads(text, parse_float=Written, parse_constant=Written)
    except json.JSONDecodeError as e:
        raise PreregError(f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg}), expected {what}") from None
    except (ValueError, RecursionError) as e:  # an integer of thousands of digits, nesting past the parser's depth
        raise PreregError(f"{path}: not readable as JSON ({str(e).splitlines()[0][:120]}), expected {what}") from None


def generation_span(steps_per_generation: int, num_iterations: int, gradient_accumulation_steps: int) -> int | None:
    """Optimizer steps per TRL generation batch, ``steps_per_generation x num_iterations /
    gradient_accumulation_steps`` (TRL 1.16, ``GRPOTrainer._prepare_inputs`` generates every
    ``steps_per_generation x num_iterations`` micro-steps); None when a batch would end inside an
    optimizer step."""
    micro = steps_per_generation * num_iterations
    return None if micro % gradient_accumulation_steps else micro // gradient_accumulation_steps


def _int_arg(args: dict, key: str, where: str, default: int | None) -> int | None:
    value = args.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PreregError(f"{where}: key {key!r} is {written(value)}, expected an integer >= 1")
    return value


def batches_from_args(args: dict, where: str) -> tuple[int, int, int]:
    """From TRL's arguments (``GRPOConfig.to_dict()`` as JSON): the completions of one optimizer
    step's global batch, the completions of one generation batch and its span in optimizer steps."""
    if not isinstance(args, dict):
        raise PreregError(f"{where}: expected a JSON object of TRL's arguments (GRPOConfig.to_dict())")
    logging_steps = args.get("logging_steps", 1)
    if logging_steps is not None and (isinstance(logging_steps, bool) or logging_steps != 1):
        raise PreregError(f"{where}: key 'logging_steps' is {written(logging_steps)}: TRL then averages its metrics "
                          "between logs and the other steps are not in trainer_state.json (log every step)")
    per_device = _int_arg(args, "per_device_train_batch_size", where, None)
    if per_device is None:
        raise PreregError(f"{where}: key 'per_device_train_batch_size' missing: the completions of a step cannot be "
                          "counted (or give --completions-per-step)")
    gas = _int_arg(args, "gradient_accumulation_steps", where, 1)
    spg = _int_arg(args, "steps_per_generation", where, gas)
    iters = _int_arg(args, "num_iterations", where, 1)
    world = _int_arg(args, "world_size", where, None)
    gen_batch = _int_arg(args, "generation_batch_size", where, None)
    span = generation_span(spg, iters, gas)
    if span is None:
        raise PreregError(f"{where}: steps_per_generation {spg} x num_iterations {iters} is not a multiple of "
                          f"gradient_accumulation_steps {gas}: a generation batch would end inside an optimizer step")
    if gen_batch is None:
        gen_batch = per_device * (world or 1) * spg
    elif world is not None and gen_batch != per_device * world * spg:
        raise PreregError(f"{where}: key 'generation_batch_size' is {gen_batch}, but per_device_train_batch_size "
                          f"{per_device} x world_size {world} x steps_per_generation {spg} differ")
    if gen_batch % spg:
        raise PreregError(f"{where}: key 'generation_batch_size' is {gen_batch}, not a multiple of "
                          f"steps_per_generation {spg}")
    return gen_batch // spg * gas, gen_batch, span


def state_file(path: str | Path) -> Path:
    """``trainer_state.json`` at ``path`` (the file, or the folder holding it)."""
    p = Path(path)
    if not p.is_dir():
        return p
    if (p / STATE_FILE).is_file():
        return p / STATE_FILE
    ckpts = sorted((c for c in p.glob("checkpoint-*") if c.name[11:].isdigit() and (c / STATE_FILE).is_file()),
                   key=lambda c: int(c.name[11:]))
    hint = f"; TRL writes one into each checkpoint, the latest here is {ckpts[-1]}" if ckpts else ""
    raise PreregError(f"{p}: no {STATE_FILE} in this folder{hint}")


def _number(p: Path, i: int, e: dict, key: str, *, signed: bool = False, required: bool = True) -> float | None:
    """The entry's value of ``key`` as a float (None: absent, or null where TRL found no value)."""
    value = e.get(key)
    if value is None:
        if required:
            raise PreregError(f"{p}: log_history[{i}] (step {e['step']}): key {key!r} "
                              f"{'missing' if key not in e else 'is null'}, expected a number")
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (not signed and value < 0):
        raise PreregError(f"{p}: log_history[{i}] (step {e['step']}): key {key!r} is {written(value)}, "
                          f"expected a finite number{'' if signed else ' >= 0'}")
    return float(value)


def read_log_history(path: str | Path) -> tuple[list[tuple[int, dict]], dict]:
    """The training entries of ``log_history`` as ``(index, entry)``, in order, steps 1..n each
    once, and the whole state; evaluation (``eval_*``) and summary (``train_runtime``) entries
    are left out."""
    p = Path(path)
    state = read_json(p, f"TRL's {STATE_FILE}")
    hist = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(hist, list):
        raise PreregError(f"{p}: key 'log_history' missing or not a list (is this TRL's {STATE_FILE}?)")
    every = state.get("logging_steps")
    if every is not None and (isinstance(every, bool) or every != 1):
        raise PreregError(f"{p}: key 'logging_steps' is {written(every)}: every training step must be logged (TRL "
                          "averages its metrics between logs, and the other steps' tokens are not in log_history)")
    out: list[tuple[int, dict]] = []
    for i, e in enumerate(hist):
        if not isinstance(e, dict):
            raise PreregError(f"{p}: log_history[{i}] is {written(e)[:60]}, expected an object")
        step = e.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise PreregError(f"{p}: log_history[{i}]: key 'step' is {written(step) if 'step' in e else 'missing'}, "
                              "expected an integer >= 0")
        if "train_runtime" in e or any(str(k).startswith("eval_") for k in e):
            continue
        if out and step == out[-1][1]["step"]:
            raise PreregError(f"{p}: log_history[{i}]: step {step} logged again (first at log_history[{out[-1][0]}])")
        due = out[-1][1]["step"] + 1 if out else 1
        if step != due:
            after = f"after step {out[-1][1]['step']} (log_history[{out[-1][0]}])" if out else "first"
            raise PreregError(f"{p}: log_history[{i}]: step {step} {after}, where step {due} was due: every training step "
                              "must be logged (a logging interval above 1 drops steps, and their tokens with them)")
        out.append((i, e))
    last = state.get("global_step")
    if out and isinstance(last, int) and not isinstance(last, bool) and last > out[-1][1]["step"]:
        raise PreregError(f"{p}: key 'global_step' is {last}, but the last training entry is step {out[-1][1]['step']} "
                          f"(log_history[{out[-1][0]}]): the later steps are not logged")
    return out, state


def generation_rows(p: Path, entries: list[tuple[int, dict]], span: int, why: str) -> pd.DataFrame:
    """One row per generation batch: ``step`` (its number, 1..), ``line`` (its first entry),
    the completion metrics of its first step, ``step_time`` summed and ``last_step``."""
    rows: list[dict] = []
    for i, e in entries:
        first = (e["step"] - 1) % span == 0
        has = e.get(LENGTH) is not None
        if has != first:
            what = (f"key {LENGTH!r} {'missing' if LENGTH not in e else 'is null'}: TRL generates at this step"
                    if first else f"key {LENGTH!r} is {written(e[LENGTH])} inside a generation batch")
            raise PreregError(f"{p}: log_history[{i}] (step {e['step']}): {what} ({why})")
        seconds = _number(p, i, e, TIME)
        if first:
            row = {"step": len(rows) + 1, "line": f"log_history[{i}]", "entry": i,
                   LENGTH: _number(p, i, e, LENGTH), TIME: 0.0}
            for key in OPTIONAL.values():
                row[key] = _number(p, i, e, key, signed=key in SIGNED, required=False)
            rows.append(row)
        rows[-1][TIME] += seconds
        rows[-1]["last_step"] = e["step"]
    return pd.DataFrame(rows)


def _check_num_tokens(p: Path, gens: pd.DataFrame, hist: dict[int, dict], per_generation: int, source: str) -> None:
    """``num_tokens`` counts prompts and completions since the start: each generation batch adds at
    least its completions."""
    prev, prev_at = 0.0, "0 at the start"
    for entry, line in zip(gens["entry"].tolist(), gens["line"].tolist()):
        e = hist[entry]
        cur = e.get("num_tokens")
        if cur is None:
            continue
        if float(cur) - prev < float(e[LENGTH]) * per_generation - 0.5:
            raise PreregError(f"{p}: {line} (step {e['step']}): key 'num_tokens' is {written(cur)} after {prev_at}: "
                              f"fewer than {LENGTH} {written(e[LENGTH])} x {per_generation} completions per generation "
                              f"batch ({source}): the completions per step are wrong")
        prev, prev_at = float(cur), f"{written(cur)} at {line}"


def import_trl_state(path: str | Path, *, completions_per_step: int | None = None, args: str | Path | dict | None = None,
                     evaluations: str | Path | None = None, eval_set: str | None = None, eval_seed: int | None = None,
                     started_at: datetime | None = None, ended_at: datetime | None = None, trainer: str = "trl",
                     device: str = "unknown") -> ImportedRun:
    """Read ``trainer_state.json`` (``path``: the file or the folder holding it); ``args``: TRL's
    arguments (``GRPOConfig.to_dict()``) as a JSON file or a dict; ``evaluations``: evaluation
    outputs to re-score."""
    p = state_file(path)
    args_path = Path(args) if isinstance(args, (str, Path)) else None
    where_args = str(args_path) if args_path else "--args"
    cfg = read_json(args_path, "TRL's arguments as JSON") if args_path else dict(args or {})
    span = 1
    if cfg:
        per_step, per_generation, span = batches_from_args(cfg, where_args)
        if completions_per_step is not None and completions_per_step != per_step:
            raise PreregError(f"--completions-per-step {completions_per_step} contradicts {where_args} ({per_step})")
        source = f"generation_batch_size, from {where_args}"
    elif completions_per_step is None:
        raise PreregError(f"{p}: the completions per step are not in {STATE_FILE}: give --completions-per-step "
                          "(per_device_train_batch_size x processes x gradient_accumulation_steps) or --args")
    else:
        per_generation, source = completions_per_step, "--completions-per-step"
    entries, state = read_log_history(p)
    if not entries:
        raise PreregError(f"{p}: log_history holds no training step")
    if not any(TIME in e for _, e in entries):
        raise PreregError(f"{p}: no per-step time ({TIME!r}) in log_history: train_runtime covers the whole run, evaluation "
                          "and saving included, so training seconds cannot be read (train with PreregCallback instead)")
    why = (f"a generation batch spans {span} optimizer step(s): steps_per_generation x num_iterations / "
           f"gradient_accumulation_steps in {where_args}" if cfg else
           "without --args every step is taken to generate; a run whose generation batches span several steps "
           "(steps_per_generation, num_iterations) needs --args")
    gens = generation_rows(p, entries, span, why)
    iterations = iterations_from_lengths(gens, where=str(p), length_key=LENGTH, responses_per_step=per_generation,
                                         seconds_key=TIME, updates_per_step=span, optional=OPTIONAL)
    iterations["updates"] = gens["last_step"].to_numpy()
    _check_num_tokens(p, gens, dict(entries), per_generation, source)
    files = [file_record(p, p.parent)] + ([file_record(args_path, args_path.parent)] if args_path else [])
    ev, more = outputs_evaluations(evaluations, eval_set=eval_set, eval_seed=eval_seed)
    if len(ev):
        ev = _at_iterations(ev, Path(evaluations), span, int(gens["last_step"].iloc[-1]))
    files += more
    # TRL times GRPOTrainer.training_step (generation, weight sync to vLLM, forward and backward of
    # every micro-step) but not the optimizer step that follows it (trl 1.16): an undercount, said
    notes = ["stages not split: seconds_step only (stage shares unavailable)",
             "seconds_step = TRL's step_time, which leaves out the optimizer step itself"]
    if eval_seed is None:
        notes.append("evaluation sampling seed not known")
    return ImportedRun(trainer=trainer, importer="trl-state", iterations=iterations, evaluations=ev, config=cfg,
                       source={"files": files, "key_map": KEY_MAP, "completions_per_generation": per_generation,
                               "generation_span_steps": span, "global_step": state.get("global_step"), "notes": notes},
                       started_at=started_at, ended_at=ended_at, device=device)


def _at_iterations(ev: pd.DataFrame, where: Path, span: int, last_step: int) -> pd.DataFrame:
    """Evaluation rows stamped with optimizer steps (the outputs file's ``step``) moved to
    iterations (generation batches of ``span`` steps)."""
    steps = ev["iteration"].astype(int)
    bad = steps[(steps % span != 0) | (steps > last_step)]
    if len(bad):
        s = int(bad.iloc[0])
        what = (f"after the last step logged ({last_step})" if s > last_step else
                f"inside a generation batch of {span} optimizer steps")
        raise PreregError(f"{where}: an evaluation at step {s}, {what}")
    return ev.assign(iteration=steps // span)


__all__ = ["KEY_MAP", "STATE_FILE", "Written", "batches_from_args", "generation_span", "import_trl_state", "read_json",
           "read_log_history", "state_file", "written"]
