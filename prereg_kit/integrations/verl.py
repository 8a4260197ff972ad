"""verl: its ``file`` tracker's JSON lines and its validation dumps, as an :class:`ImportedRun`.

What verl writes (verl 0.9.1; ``verl/utils/tracking.py`` ``FileLogger``;
``verl/trainer/ppo/ray_trainer.py`` ``RayPPOTrainer.fit`` and ``_write_generations``, and the
same in ``verl/trainer/ppo/v1/trainer_base.py`` for the V1 trainer, 0.9.1's default):

- one JSON line per logged step, ``{"step": N, "data": {metric: value, ...}}``, to
  ``$VERL_FILE_LOGGER_PATH`` (or ``<project>/<experiment>.jsonl``), written with orjson's
  ``OPT_SERIALIZE_NUMPY``: integer metrics (``perf/total_num_tokens``, numpy ints) are JSON
  integers, NaN and infinite values are ``null``. With ``trainer.val_before_train`` (default
  true) a line of validation metrics only comes first, at step 0 (at the checkpoint's step when a
  run resumes); then steps 1..n, each with the training metrics and, at every
  ``trainer.test_freq``-th step and the last one, the validation metrics. The logger opens its
  file with "wb": a resumed run truncates the file of the attempt before it;
- with ``trainer.validation_data_dir`` set, ``<dir>/<global_step>.jsonl``: one line per
  validation output with ``input``, ``output``, ``gts`` (the reference answer; null where the
  data has none), ``score``, ``step`` and the reward function's extra keys; no data source.

The mapping (dense-rewards paper §2.3: compute is counted in generated tokens of every kind and in training
seconds split into stages; evaluations are read at matched compute):

- generated tokens of a step: ``perf/total_num_tokens`` counts prompt + response tokens of every
  response; with the prompt and response length means, the response share is
  ``total x r / (p + r)`` (= responses x mean response length); without the total, the response
  mean times the responses per step (``data.train_batch_size x actor_rollout_ref.rollout.n``);
- stages: :data:`~.tracker_presets.VERL_STAGES` (generation = ``gen``; credit = ``reward +
  values + adv + update_critic``; update = ``old_log_prob + ref + update_actor``, as the built-in
  trainer times them; weight sync = ``update_weights`` where logged, else 0: older verl syncs
  inside generation's sharding manager, so the time is in generation); selection = 0.
  ``timing_s/step`` includes validation and checkpointing and is never used;
- updates per step: ``ppo_epochs x (train_batch_size // ppo_mini_batch_size)`` optimizer steps
  (the V1 trainer: ``parameter_sync_step`` local updates of ``train_batch_size //
  parameter_sync_step`` prompts each); none in the steps before ``trainer.critic_warmup``;
- evaluations: every output of a validation dump re-scored with our verifiers
  (:mod:`.rescore`); a problem is its input text (``problem_id`` = a hash of it unless the dump
  has a ``problem_id`` or an ``id``); verl's own ``score`` is kept beside ours as
  ``tool_score_mean``.

A resumed run: give each attempt's file in the order the attempts ran. A later attempt's first
training step k resumes from the checkpoint of step k - 1: its lines replace the earlier
attempts' lines of step k on (those steps' weights were lost and trained again), and the steps
before k come from the earlier files. A gap between the files is refused.

Refused: dynamic sampling (``algorithm.filter_groups.enable``, or the DAPO recipe's
``train/num_gen_batches`` key): verl's logs then count only the kept groups' tokens, and its
dumps hold only kept outputs, so the discarded tokens (part of the compute, dense-rewards paper §2.3) are
not in any file verl writes; the V1 trainer's asynchronous modes (``trainer.v1.trainer_mode``
other than ``sync``): generation then overlaps training, so ``timing_s/gen`` is a wait.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import PreregError
from .importing import (
    MAX_STEP,
    MAX_STEP_SECONDS,
    MAX_STEP_TOKENS,
    ImportedRun,
    file_record,
)
from .jsonlines import finite, is_number, json_lines, written
from .rescore import SameAnswer, is_integer, problem_of, scored_outputs, text_of
from .tracker_presets import VERL_STAGES

GEN, UPDATE_ACTOR, STEP = "timing_s/gen", "timing_s/update_actor", "timing_s/step"
TOTAL, PROMPT_MEAN, RESPONSE_MEAN = "perf/total_num_tokens", "prompt_length/mean", "response_length/mean"
TRAINING_KEYS = (GEN, TOTAL, RESPONSE_MEAN, UPDATE_ACTOR)
KEY_MAP = {
    "tokens_rollout": f"{TOTAL} x {RESPONSE_MEAN} / ({PROMPT_MEAN} + {RESPONSE_MEAN}), else {RESPONSE_MEAN} x responses per step",
    "seconds_selection": "0", **{stage: " + ".join(keys) for stage, keys in VERL_STAGES.items()},
    "updates": "ppo_epochs x (train_batch_size // ppo_mini_batch_size) per step",
    "reward_mean": "critic/score/mean", "length_mean": RESPONSE_MEAN, "truncation_rate": "response_length/clip_ratio",
}
NULL = "verl's file logger writes NaN and infinite values as null"


@dataclass
class LoggedStep:
    """One line of verl's file logger: the step, where it was read, and its metrics."""

    step: int
    line: int
    path: Path
    data: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}: step {self.step}"

    @property
    def training(self) -> bool:
        """A training step's line (the line before training and a resumed run's first line hold
        validation metrics only)."""
        return any(k in self.data for k in TRAINING_KEYS)


def nested(cfg: dict, dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for ``"a.b"``; ``default`` when any part is missing."""
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


def read_config(path: str | Path) -> dict:
    """verl's resolved hydra config (``.hydra/config.yaml``, or the same as JSON)."""
    p = Path(path)
    if not p.is_file():
        raise PreregError(f"{p}: no such file" if not p.exists() else f"{p}: a folder, not a config file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PreregError(f"{p}: not UTF-8 text (byte {e.start + 1}): a config is text") from None
    try:
        if p.suffix == ".json":
            cfg = json.loads(text)
        else:
            import yaml

            cfg = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - any parse error is the file's
        raise PreregError(f"{p}: not a readable config: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(cfg, dict):
        raise PreregError(f"{p}: a config is a mapping of settings, got {type(cfg).__name__}")
    return cfg


def read_file_logger(path: str | Path) -> list[LoggedStep]:
    """The lines verl's ``file`` logger wrote, in file order. A line that is not ``{"step":
    <integer >= 0>, "data": {...}}``, a step logged twice in one file, or a file without a line
    is refused naming the file, the line and the value as written."""
    p = Path(path)
    steps, seen = [], {}
    for n, rec in json_lines(p):
        if not isinstance(rec, dict) or "step" not in rec or "data" not in rec:
            raise PreregError(f"{p}:{n}: expected {{\"step\": <integer>, \"data\": {{...}}}} (a line of verl's file logger), "
                              f"got {written(rec)}")
        step, data = rec["step"], rec["data"]
        if not is_integer(step) or not 0 <= step < MAX_STEP:
            raise PreregError(f"{p}:{n}: key 'step' is {written(step)}, expected an integer >= 0 (verl's global step)")
        if not isinstance(data, dict):
            raise PreregError(f"{p}:{n}: key 'data' is {written(data)}, expected an object of logged metrics")
        if step in seen:
            raise PreregError(f"{p}:{n}: step {step} logged again (first at line {seen[step]}): verl logs a step once per "
                              "file; give each attempt of a resumed run as its own file, in order")
        seen[step] = n
        steps.append(LoggedStep(int(step), n, p, data))
    if not steps:
        raise PreregError(f"{p}: no steps logged (the file is empty)")
    return steps


def training_steps(attempts: Sequence[list[LoggedStep]]) -> tuple[list[LoggedStep], list[str]]:
    """The training steps 1..n of a run from the file of each attempt, in the order they ran
    (see the module docstring for a resumed run), and notes on what a later attempt replaced."""
    merged: dict[int, LoggedStep] = {}
    notes = []
    for k, lines in enumerate(attempts):
        train = [s for s in lines if s.training]
        for a, b in pairwise(train):
            if b.step != a.step + 1:
                raise PreregError(f"{b.path}:{b.line}: training step {b.step} follows step {a.step} (line {a.line}): "
                                  "verl logs every step in order (was the file cut or edited?)")
        if not train:
            continue
        first = train[0]
        done = max(merged) if merged else 0
        if first.step > done + 1:
            gap = f"steps {done + 1}..{first.step - 1}" if first.step - 1 > done + 1 else f"step {done + 1}"
            if k == 0 or not merged:
                raise PreregError(f"{first.where}: the first training step logged is {first.step}, not 1: verl's file "
                                  "logger empties its file when a run resumes, so the steps before it are in the earlier "
                                  "attempt's file: give that file first (PATH... in the order the attempts ran)")
            raise PreregError(f"{first.where}: this attempt starts at step {first.step}, but the files before it end at "
                              f"step {done}: {gap} are in no file given")
        redone = [s for s in sorted(merged) if s >= first.step]
        if redone:
            notes.append(f"steps {redone[0]}..{redone[-1]} of {merged[redone[0]].path.name} were trained again from a "
                         f"checkpoint by the attempt in {first.path.name}: its lines are used")
            for s in redone:
                del merged[s]
        merged.update({s.step: s for s in train})
    if not merged:
        where = ", ".join(str(lines[0].path) for lines in attempts)
        raise PreregError(f"{where}: no training step has any of {', '.join(TRAINING_KEYS)}")
    return [merged[s] for s in sorted(merged)], notes


def _number(s: LoggedStep, key: str, *, required: bool, limit: float) -> float | None:
    """The logged value of ``key`` at step ``s`` as a float >= 0 and below ``limit``; None when
    the key is not logged and not required. Refused naming the line, key and value as written."""
    if key not in s.data:
        if required:
            raise PreregError(f"{s.where}: key {key!r} missing")
        return None
    v = s.data[key]
    if v is None:
        raise PreregError(f"{s.where}: key {key!r} is null ({NULL}): a number >= 0 is needed")
    if not is_number(v) or (isinstance(v, float) and not finite(v)) or v < 0:
        raise PreregError(f"{s.where}: key {key!r} is {written(v)}, expected a number >= 0")
    if v >= limit:  # an integer beyond a float's range too
        raise PreregError(f"{s.where}: key {key!r} is {written(v)}: above {'2^40 tokens' if limit == MAX_STEP_TOKENS else '10^9 seconds'}, "
                          "which no step reaches")
    return float(v)


def _optional(s: LoggedStep, key: str, lo: float | None = None, hi: float | None = None) -> float:
    """An informative metric (reward, truncation): NaN where not logged or null; a value that is
    not a number in [lo, hi] is refused."""
    v = s.data.get(key)
    if v is None:
        return math.nan
    if not is_number(v):
        raise PreregError(f"{s.where}: key {key!r} is {written(v)}, expected a number")
    if not finite(v):
        return math.nan
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise PreregError(f"{s.where}: key {key!r} is {written(v)}, expected a number between {lo:g} and {hi:g}")
    return float(v)


def _tokens(s: LoggedStep, responses_per_step: int | None) -> tuple[int, float]:
    """Generated tokens of step ``s`` and its mean response length (see the module docstring)."""
    r = _number(s, RESPONSE_MEAN, required=True, limit=MAX_STEP_TOKENS)
    total = _number(s, TOTAL, required=False, limit=MAX_STEP_TOKENS)
    if total is not None:
        p = _number(s, PROMPT_MEAN, required=True, limit=MAX_STEP_TOKENS)
        if p + r <= 0:
            if total > 0:
                raise PreregError(f"{s.where}: key {TOTAL!r} is {written(s.data[TOTAL])} but {PROMPT_MEAN!r} and "
                                  f"{RESPONSE_MEAN!r} are 0")
            return 0, r
        n_resp = total / (p + r)
        if responses_per_step is not None and abs(n_resp - responses_per_step) > 0.5:
            raise PreregError(f"{s.where}: {TOTAL} {written(s.data[TOTAL])} / ({PROMPT_MEAN} {written(s.data[PROMPT_MEAN])} + "
                              f"{RESPONSE_MEAN} {written(s.data[RESPONSE_MEAN])}) is {n_resp:.1f} responses, but a step has "
                              f"{responses_per_step} (--responses-per-step, or data.train_batch_size x "
                              "actor_rollout_ref.rollout.n of --config)")
        return round(total * r / (p + r)), r
    if responses_per_step is None:
        raise PreregError(f"{s.where}: {TOTAL} not logged: give the responses per step (--config with "
                          "data.train_batch_size and actor_rollout_ref.rollout.n, or --responses-per-step)")
    if r * responses_per_step >= MAX_STEP_TOKENS:
        raise PreregError(f"{s.where}: key {RESPONSE_MEAN!r} is {written(s.data[RESPONSE_MEAN])}: with {responses_per_step} "
                          "responses that is above 2^40 tokens, which no step reaches")
    return round(r * responses_per_step), r


def iterations_from_steps(steps: Sequence[LoggedStep], *, responses_per_step: int | None, updates_per_step: int,
                          critic_warmup: int = 0) -> pd.DataFrame:
    """Run-log iteration rows from verl's training steps 1..n (see the module docstring)."""
    rows, updates = [], 0
    for i, s in enumerate(steps):
        if s.step != i + 1:
            raise PreregError(f"{s.where}: training steps must run 1..n without gaps; found step {s.step} where {i + 1} "
                              "was due (verl logs every step: was the file cut?)")
        if "train/num_gen_batches" in s.data:
            raise PreregError(f"{s.where}: the run used dynamic sampling (train/num_gen_batches logged): verl logs only the "
                              "kept groups' tokens, so the discarded tokens are missing")
        if GEN not in s.data and STEP in s.data:
            raise PreregError(f"{s.where}: only {STEP} is logged, which includes validation and checkpointing; the stage "
                              f"timers ({GEN}, {UPDATE_ACTOR}, ...) are needed")
        actor = s.step >= critic_warmup  # verl updates the actor from step trainer.critic_warmup on
        stages = {}
        for stage, keys in VERL_STAGES.items():
            stages[stage] = sum(_number(s, k, required=k == GEN or (k == UPDATE_ACTOR and actor), limit=MAX_STEP_SECONDS) or 0.0
                                for k in keys)
        tokens, r = _tokens(s, responses_per_step)
        updates += updates_per_step if actor else 0
        row = {"iteration": i, "tokens_rollout": int(tokens), "tokens_continuation": 0, "tokens_discarded": 0,
               "seconds_selection": 0.0, **stages, "updates": updates, "length_mean": r, "verl_step": s.step,
               "reward_mean": _optional(s, "critic/score/mean"),
               "truncation_rate": _optional(s, "response_length/clip_ratio", 0.0, 1.0)}
        if TOTAL in s.data:
            row["total_num_tokens"] = float(s.data[TOTAL])
        rows.append(row)
    return pd.DataFrame(rows)


DUMP = re.compile(r"\d+\.jsonl")


def dump_files(folder: str | Path) -> list[tuple[int, Path]]:
    """``(global_step, file)`` of the validation dumps ``<folder>/<global_step>.jsonl``, by step."""
    d = Path(folder)
    if not d.is_dir():
        raise PreregError(f"{d}: no such folder" if not d.exists() else
                          f"{d}: a file, not the folder of validation dumps (trainer.validation_data_dir)")
    found: dict[int, Path] = {}
    for f in sorted(d.iterdir()):
        if f.is_file() and DUMP.fullmatch(f.name):
            step = int(f.stem)
            if step in found:
                raise PreregError(f"{f}: a second dump of step {step} (the other is {found[step].name})")
            found[step] = f
    if not found:
        raise PreregError(f"{d}: no validation dumps (<global_step>.jsonl) found")
    return sorted(found.items())


def validation_records(folder: str | Path, *, eval_set: str | None = None) -> Iterator[dict[str, Any]]:
    """One record per output of verl's validation dumps, in step and line order: ``step``,
    ``eval_set`` (``eval_set``, else the line's ``data_source``), ``problem_id``, ``input``,
    ``output``, ``answer`` (verl's ``gts``), ``tool_score`` (verl's ``score``; None when not a
    number), ``file`` and ``line``. A line is refused naming the file, line, key and value."""
    for step, f in dump_files(folder):
        count, same = 0, SameAnswer("gts")
        for n, rec in json_lines(f):
            where = f"{f}:{n}"
            if not isinstance(rec, dict):
                raise PreregError(f"{where}: expected a JSON object (a line of verl's validation dump), got {written(rec)}")
            missing = [k for k in ("input", "output", "gts") if k not in rec]
            if missing:
                raise PreregError(f"{where}: key {missing[0]!r} missing (verl's validation dump has input, output, gts, score)")
            if "step" in rec and not (is_integer(rec["step"]) and rec["step"] == step):
                raise PreregError(f"{where}: key 'step' is {written(rec['step'])}, but the file is the dump of step {step}")
            if rec["gts"] is None:
                raise PreregError(f"{where}: key 'gts' is null: verl had no reference answer (reward_model.ground_truth) "
                                  "for this output, and our verifiers need one")
            answer = text_of(rec, "gts", where, what="the reference answer's text")
            output = text_of(rec, "output", where, what="the output's text")
            pid = _problem(rec, where)
            name = eval_set or rec.get("data_source")
            if not isinstance(name, str) or not name:
                raise PreregError(f"{where}: no data_source in the dump: give the plan's evaluation set (--eval-set)")
            same.check((step, name, pid), answer, str(f), n)
            score = rec.get("score")
            count += 1
            yield {"step": step, "eval_set": name, "problem_id": pid, "input": rec.get("input"), "output": output,
                   "answer": answer, "tool_score": float(score) if finite(score) else None, "file": f, "line": n}
        if not count:
            raise PreregError(f"{f}: empty validation dump (no outputs)")


def _problem(rec: dict, where: str) -> str:
    """The dump's ``problem_id``, else an ``id`` a reward function added (a string or an
    integer), else a hash of the input text (:func:`.rescore.problem_of`)."""
    pid = rec.get("id")
    if "problem_id" not in rec and ((isinstance(pid, str) and pid) or is_integer(pid)):
        return str(pid)
    return problem_of(rec, where)


def read_validation_dumps(folder: str | Path, *, eval_set: str | None) -> tuple[pd.DataFrame, list[Path]]:
    """Evaluation rows from ``<folder>/<global_step>.jsonl``: per dump and problem, samples and
    our verifiers' counts (:func:`.rescore.scored_outputs`), and verl's mean score
    (``tool_score_mean``); and the dump files read."""
    recs = list(validation_records(folder, eval_set=eval_set))
    df = pd.DataFrame(recs).rename(columns={"step": "iteration"})
    df["tool_score"] = pd.to_numeric(df["tool_score"], errors="coerce")
    return scored_outputs(df, means=("tool_score",)), [f for _, f in dump_files(folder)]


def _int_setting(cfg: dict, key: str, default: Any, where: str) -> Any:
    v = nested(cfg, key, default)
    if v is not default and (not is_integer(v) or not 0 <= v < MAX_STEP_TOKENS):
        raise PreregError(f"{where}: {key} is {written(v)}, expected an integer >= 0 (below 2^40)")
    return v


def _check_config(cfg: dict, where: str) -> None:
    if nested(cfg, "algorithm.filter_groups.enable") is True:
        raise PreregError(f"{where}: algorithm.filter_groups.enable = true (dynamic sampling): verl logs only the kept "
                          "groups' tokens and dumps only kept outputs, so the discarded tokens are not in its files")
    mode = nested(cfg, "trainer.v1.trainer_mode", "sync")
    if nested(cfg, "trainer.use_v1") is True and mode != "sync":
        raise PreregError(f"{where}: trainer.v1.trainer_mode = {written(mode)}: generation then overlaps training, so "
                          "timing_s/gen is a wait, not generation time; only the V1 trainer's sync mode (and the legacy "
                          "trainer) are read")


def _updates_per_step(cfg: dict, where: str) -> int:
    tbs = _int_setting(cfg, "data.train_batch_size", None, where)
    mini = _int_setting(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size", None, where)
    epochs = _int_setting(cfg, "actor_rollout_ref.actor.ppo_epochs", 1, where)
    if tbs is None or not mini:
        raise PreregError(f"{where}: the updates per step need data.train_batch_size and "
                          "actor_rollout_ref.actor.ppo_mini_batch_size (give --config, or --updates-per-step)")
    sync = 1
    if nested(cfg, "trainer.use_v1") is True:  # V1: parameter_sync_step local updates of tbs / sync prompts each
        sync = _int_setting(cfg, "trainer.v1.sync.parameter_sync_step", 1, where) or 1
    return sync * epochs * max(tbs // sync // mini, 1)


def import_verl(path: str | Path | Sequence[str | Path], *, config: str | Path | dict | None = None,
                validation_dir: str | Path | None = None, responses_per_step: int | None = None,
                updates_per_step: int | None = None, eval_set: str | None = None, eval_seed: int | None = None,
                started_at: datetime | None = None, ended_at: datetime | None = None, trainer: str = "verl",
                device: str = "unknown") -> ImportedRun:
    """Read a verl run: ``path`` is the ``file`` logger's JSONL (a resumed run: each attempt's
    file, in the order they ran); ``config`` verl's resolved config (a file or a dict);
    ``validation_dir`` the ``trainer.validation_data_dir`` dumps."""
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if not paths:
        raise PreregError("verl: no file logger JSONL given")
    cfg_path = Path(config) if isinstance(config, (str, Path)) else None
    cfg = read_config(cfg_path) if cfg_path else dict(config or {})
    where_cfg = str(cfg_path) if cfg_path else "--config"
    _check_config(cfg, where_cfg)
    tbs = _int_setting(cfg, "data.train_batch_size", None, where_cfg)
    n = _int_setting(cfg, "actor_rollout_ref.rollout.n", None, where_cfg)
    if responses_per_step is None and tbs is not None and n is not None:
        if tbs * n >= MAX_STEP_TOKENS:
            raise PreregError(f"{where_cfg}: data.train_batch_size {tbs} x actor_rollout_ref.rollout.n {n} responses: 2^40 "
                              "or more, beyond any step")
        responses_per_step = tbs * n
    for option, v in (("--responses-per-step", responses_per_step), ("--updates-per-step", updates_per_step)):
        if v is not None and v >= MAX_STEP_TOKENS:
            raise PreregError(f"{option}: {v}: 2^40 or more, beyond any step")
    if updates_per_step is None:
        updates_per_step = _updates_per_step(cfg, where_cfg)
    warmup = _int_setting(cfg, "trainer.critic_warmup", 0, where_cfg)
    attempts = [read_file_logger(p) for p in paths]
    steps, notes = training_steps(attempts)
    iterations = iterations_from_steps(steps, responses_per_step=responses_per_step, updates_per_step=updates_per_step,
                                       critic_warmup=warmup)
    files = [file_record(p, p.parent) | ({"kind": f"attempt {k + 1}"} if len(paths) > 1 else {})
             for k, p in enumerate(paths)]
    files += [file_record(cfg_path, cfg_path.parent)] if cfg_path else []
    if validation_dir is not None:
        evaluations, dumps = read_validation_dumps(validation_dir, eval_set=eval_set)
        last = int(iterations["verl_step"].iloc[-1])
        late = [f for f in dumps if int(f.stem) > last]
        if late:
            raise PreregError(f"{late[0]}: a validation dump of step {late[0].stem}, but the training steps logged end at "
                              f"step {last} (a later attempt's file missing?)")
        files += [file_record(f, Path(validation_dir)) | {"kind": "validation dump"} for f in dumps]
        if eval_seed is not None:
            evaluations["eval_seed"] = int(eval_seed)
    else:
        evaluations = pd.DataFrame(columns=["iteration", "eval_set", "problem_id", "samples", "correct"])
    if not any("timing_s/update_weights" in s.data for s in steps):
        notes.append("weight sync 0: this verl version does not time it apart (it is inside timing_s/gen)")
    if eval_seed is None:
        notes.append("evaluation sampling seed not known")
    return ImportedRun(trainer=trainer, importer="verl", iterations=iterations, evaluations=evaluations, config=cfg,
                       source={"files": files, "key_map": KEY_MAP, "responses_per_step": responses_per_step,
                               "updates_per_step": updates_per_step, "notes": notes},
                       started_at=started_at, ended_at=ended_at, device=device)


__all__ = ["KEY_MAP", "LoggedStep", "dump_files", "import_verl", "iterations_from_steps", "nested", "read_config",
           "read_file_logger", "read_validation_dumps", "training_steps", "validation_records"]
