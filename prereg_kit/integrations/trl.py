"""``PreregCallback``: a TRL ``GRPOTrainer`` writes a preregistered run log as it trains.

What is counted, in the papers' terms (dense-rewards paper §2.3, §C.1 "Implementation", App. D):

* **One iteration per generation batch.** TRL generates once every ``steps_per_generation ×
  num_iterations`` micro-batches, i.e. every ``k = steps_per_generation · num_iterations /
  gradient_accumulation_steps`` optimizer steps; the run log's iteration is that batch and its
  ``updates`` are TRL's cumulative optimizer steps (``global_step``).
* **Generated tokens** (what B counts): the completion tokens of the whole global generation
  batch, EOS included, prompts and padding not — counted exactly from the ``completion_ids``
  TRL hands the preregistered reward function (``trl_rewards.TokenCounter``), summed over
  processes, and checked against TRL's ``completions/mean_length`` × the batch's completions.
  TRL's ``num_tokens`` counts prompts too: it is kept only as the column ``trl_num_tokens``.
* **Training seconds**: TRL does not split generation from the update, so each iteration
  logs the unsplit ``seconds_step`` (run-log format): wall seconds between ``on_step_begin`` and
  ``on_step_end`` of its optimizer steps (generation, reward, loss, optimizer step); evaluation,
  logging and checkpointing happen after ``on_step_end`` and are not in it.
* ``reward_mean``, ``length_mean``, ``truncation_rate`` from TRL's ``reward``, the exact count,
  ``completions/clipped_ratio``; ``mixed_share`` = 1 − ``frac_reward_zero_std`` only when the one
  reward is ours (0/1, so a group with zero spread is all right or all wrong) and spreads are
  per group (``scale_rewards`` "group" or "none"); otherwise it is not logged.
* **Evaluations** with the built-in trainer's evaluator (``trainer.core.evaluate``): at the start
  and at the first iteration whose cumulative tokens reach each multiple of the plan's interval
  (B/16 by default), with the plan's sets, samples, temperature, top-p, verifiers and sampling
  seeds ``derive_seed(seed, e, "eval:<set>")`` (common random numbers with our own runs); run in
  ``on_log``, after the timed step. Training stops after the evaluation at or after ``train_to``.
  ``evaluate="deferred"`` records a checkpoint per evaluation point instead, scored later by
  ``prereg evaluate-checkpoints`` (``trl_deferred``) with the same evaluator and seeds.
* **Outputs** (``outputs=PATH``): every live evaluation's completions appended as JSON lines
  (``step`` = TRL's global step, ``eval_index``, ``eval_set``, ``problem_id``, ``input``,
  ``output``, ``answer``): the outputs file ``rescore.read_outputs`` and ``--evaluations`` read.
* **Progress**: the lines ``prereg run`` writes (``trainer.progress_lines``), through the
  ``prereg_kit`` logger, never printed; blind in the main stage (no accuracy, reward or
  contrast until the study is analyzed), the last accuracy in the other stages.

Refused with one line: a main-stage run of an unlocked or changed plan, a configuration or seed
the stage does not have, TRL settings that differ from the preregistered recipe (group size,
completion limit, temperature, top-p, learning rate, prompts per batch), a logging interval
that merges or drops generation batches, TRL's own evaluation loop (its rewards would be
counted as training tokens), and a recipe TRL cannot train (credit rules, prompt selection,
reward channels). Only the main process writes.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from prereg_kit import __version__
from prereg_kit.chain.seal import seal_runs
from prereg_kit.errors import PreregError
from prereg_kit.plan import load_plan
from prereg_kit.runlog import RunLogWriter, RunMeta, read_table, utc_now
from prereg_kit.study.jobs import planned_runs, require_locked
from trainer.core.assets import prepare_assets, synthetic_eval_size
from trainer.core.budget import Counters, Schedule
from trainer.core.evaluate import accuracy, load_eval_sets
from trainer.core.evaluate import evaluate as run_evaluation
from trainer.data.problems import load_problems, task_pool
from trainer.launch import plan_jobs
from trainer.progress_lines import RunLines

from .trl_args import check_args, generation_span
from .trl_deferred import read_pending, write_pending
from .trl_rewards import BINARY_PREFIX, TokenCounter, reward_functions, unsupported

EXTRA = "pip install 'prereg-kit[trl]'"
log = logging.getLogger(__name__)  # the application chooses where the progress lines go (logging.basicConfig)
TOKEN_TOLERANCE = 0.5  # tokens: TRL's mean length is a float32 mean; exact counts must round to it


def _versions() -> dict[str, str]:
    out = {}
    for name in ("trl", "transformers", "torch", "accelerate", "datasets"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = ""
    return out


class _PreregCallback:
    """The callback's logic; :data:`PreregCallback` is it on ``transformers.TrainerCallback``."""

    def __init__(self, study_dir: str | Path, configuration: str, seed: int, *, stage: str = "main",
                 evaluate: str = "live", tokenizer: Any = None, eval_batch_size: int | None = None,
                 counter: TokenCounter | None = None, outputs: str | Path | None = None) -> None:
        if evaluate not in ("live", "deferred"):
            raise PreregError(f"PreregCallback: evaluate = {evaluate!r}: expected 'live' or 'deferred'")
        self.deferred = evaluate == "deferred"
        if outputs is not None and self.deferred:
            raise PreregError(f"PreregCallback: outputs = {str(outputs)!r} with evaluate = 'deferred': the outputs are "
                              "those of live evaluations")
        self.outputs = Path(outputs) if outputs is not None else None
        pf = load_plan(study_dir)
        if stage == "main":
            require_locked(pf)  # before anything of the run is opened
        runs = planned_runs(pf.plan, stage)
        if (configuration, seed) not in runs:
            have = sorted({c for c, _ in runs})
            seeds = sorted({s for c, s in runs if c == configuration})
            what = (f"seed {seed} is not a seed of configuration {configuration!r} (have: {', '.join(map(str, seeds))})"
                    if seeds else f"configuration {configuration!r} is not in the stage (have: {', '.join(have)})")
            raise PreregError(f"{pf.path}: stage {stage!r}: {what}")
        _, jobs = plan_jobs(study_dir, stage, [configuration], [seed])
        job = jobs[0]
        if job.state == "complete":
            raise PreregError(f"{job.folder}: already complete; a complete run is never reopened (move it aside to retrain)")
        if job.state == "busy":
            raise PreregError(f"{job.folder}: another process is writing this run")
        self.plan_file, self.spec, self.cfg = pf, job.spec, job.spec.config
        self.job = job
        # the built-in trainer's progress lines: blind in the main stage (no accuracy until analyzed)
        self.lines = RunLines([job], log.info, blind=stage == "main")
        why = unsupported(self.cfg)
        if why:
            raise PreregError(f"configuration {configuration!r}: {why}: TRL's GRPOTrainer cannot train it as preregistered")
        self.tokenizer, self.eval_batch_size = tokenizer, eval_batch_size
        self.counter = counter or TokenCounter()
        self.counters = Counters()
        self.schedule: Schedule | None = None
        self.writer: RunLogWriter | None = None
        self.span = 1
        self._t0: float | None = None
        self._step_seconds = 0.0
        self._gen: dict | None = None  # the current generation batch's TRL metrics and exact tokens
        self._assets = None
        self._eval_sets = None
        self._binary = True
        self._counted = "exact: the completion_ids TRL passed the reward function"

    # ---------------------------------------------------------------- what train.py needs
    @property
    def run_dir(self) -> Path:
        return Path(self.spec.run_dir)

    def assets(self):
        """The configuration's model folder, training pool and evaluation set (built or cached)."""
        if self._assets is None:
            n_eval = synthetic_eval_size(self.spec.eval_sets)
            self._assets = prepare_assets(self.cfg, self.spec.cache_dir, self.spec.study_dir, n_eval)
        return self._assets

    def grpo_settings(self) -> dict[str, Any]:
        """``GRPOConfig`` keywords that the preregistered recipe fixes (what :func:`check_args` holds
        TRL to), plus one log per optimizer step and TRL's evaluation loop off."""
        r = self.cfg.rollout
        return {"num_generations": r.group_size, "per_device_train_batch_size": r.prompts_per_iteration * r.group_size,
                "max_completion_length": r.completion_limit, "temperature": r.temperature, "top_p": r.top_p,
                "learning_rate": self.cfg.update.learning_rate, "lr_scheduler_type": "constant",
                "max_grad_norm": self.cfg.update.grad_clip, "seed": self.spec.seed, "logging_steps": 1,
                "eval_strategy": "no"}

    def train_problems(self) -> list:
        """The configuration's training pool as our trainer reads it: numeric answers, problems
        near-duplicating an evaluation problem removed (``trainer.loop.setup``)."""
        a, task = self.assets(), self.cfg.task
        pool = (task_pool(task.name, a.train_file, task.levels) if task.name in ("math", "gsm8k")
                else load_problems(a.train_file, source="train"))
        pool = pool.with_tests() if task.name == "code" else pool.numeric_only()
        if self._eval_sets is None:
            self._eval_sets = load_eval_sets(self.spec, a.synthetic_eval)
        return list(pool.without_near_duplicates(*[es.problems for es in self._eval_sets]))

    def reward_functions(self) -> list:
        """The preregistered reward as TRL reward functions, counting generated tokens for this callback."""
        return reward_functions(self.plan_file.plan, self.spec.configuration, self.counter)

    # ---------------------------------------------------------------- events
    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.span = check_args(args, self.cfg, self.spec.configuration)
        if self.deferred and args.save_total_limit:
            raise PreregError(f"TRL: save_total_limit = {args.save_total_limit} would remove the checkpoints that "
                              "deferred evaluation scores later; leave it unset")
        self._output_dir = Path(args.output_dir)
        spec = self.spec
        by_it = spec.budget_iterations is not None
        self.schedule = Schedule(spec.eval_interval, spec.stop_tokens, spec.iteration_stop, self.counters, by_iterations=by_it)
        self.tokenizer = self.tokenizer or processing_class
        self._binary = str(getattr(args, "scale_rewards", "group")) in ("group", "none", "True", "False")
        if state.global_step % self.span:
            raise PreregError(f"TRL resumed at step {state.global_step}, inside a generation batch of {self.span} steps")
        folder = self.run_dir
        resume = (folder / "meta.json").exists()
        if resume:  # every process: the same counters, so all stop at the same step
            self._restore(state.global_step // self.span)
        if not _main(state):
            return control
        meta = self._meta(args, model)
        if resume:
            self.writer = RunLogWriter(folder, meta, resume=True, at_iteration=self.counters.iteration)
            if self.deferred:
                write_pending(folder, [e for e in read_pending(folder) if e["eval_index"] < self.counters.eval_index])
        else:
            if state.global_step:
                raise PreregError(f"{folder}: TRL resumes at step {state.global_step} but the run has no log")
            self.writer = RunLogWriter(folder, meta)
        if self.outputs is not None:  # a resume keeps the evaluations its log keeps
            _keep_outputs(self.outputs, self.counters.eval_index if resume else 0)
        if self.counters.eval_index == 0:
            self._report(self._evaluate(model, row=None, step=0))
        else:
            self._report()
        control.should_training_stop = self.counters.done
        return control

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0 = _clock()
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is not None:
            self._step_seconds += _clock() - self._t0
            self._t0 = None
        return control

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        logs = logs or {}
        if "train_runtime" in logs:  # the trainer's closing summary, not a step
            return control
        if self.counters.done:  # resumed after the last evaluation: TRL runs a step before it stops; not the run's
            control.should_training_stop = True
            return control
        if "completions/mean_length" in logs:
            if self._gen is not None:
                raise PreregError(f"TRL step {state.global_step}: two generation batches in one iteration")
            tokens, n = _global_sum(self.counter.take())
            self._gen = {"logs": dict(logs), "tokens": tokens, "completions": n}
        if state.global_step % self.span:
            return control
        if self._gen is None:
            raise PreregError(f"TRL step {state.global_step}: no generation metrics logged for this generation batch")
        gen, self._gen = self._gen, None
        row = self._row(args, state, gen)
        secs, self._step_seconds = self._step_seconds, 0.0
        row["seconds_step"] = secs
        c = self.counters
        before = c.total_tokens
        c.tokens["rollout"] += row["tokens_rollout"]
        c.train_seconds += secs
        c.updates = int(state.global_step)
        c.iteration += 1
        if self.schedule.eval_due(before, c.total_tokens):
            c.done = self.schedule.finished(c.total_tokens)
            if _main(state):
                self._report(self._evaluate(model, row=row, step=state.global_step))
            control.should_save = True  # a checkpoint at each evaluation, as our trainer does: resumes start there
            control.should_training_stop = c.done
        elif _main(state):
            self.writer.log_iteration(row)
            self._report()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if not _main(state) or self.writer is None:
            return control
        c = self.counters
        source = {**self.writer.meta.source, "tokens": self._counted, "training_done": c.done}
        self.writer.meta = self.writer.meta.model_copy(update={"ended_at": utc_now(), "source": source})
        if self.deferred and c.done:  # complete once `prereg evaluate-checkpoints` has scored the checkpoints
            self.writer.finish("stopped")
            self._done("trained, evaluations deferred")
            log.info(f"{self.run_dir}: trained to train_to; score its checkpoints with "
                     f"`prereg evaluate-checkpoints {self.spec.study_dir}`")
            return control
        if not c.done:
            self.writer.finish("stopped")
            self._done("stopped")
            log.warning(f"{self.run_dir}: training ended at {c.total_tokens} generated tokens, before the plan's stop "
                        f"({self.spec.stop_tokens}); the run is incomplete: resume it (resume_from_checkpoint) with a "
                        "larger max_steps")
            return control
        self.writer.finish("complete")
        self.writer = None
        self._done("complete")
        if self.spec.stage == "main":
            res = seal_runs(self.spec.study_dir, [self.spec.run_dir])
            if res.refused:
                raise PreregError(f"the run completed but was not sealed: {res.refused[0]}")
        return control

    # ---------------------------------------------------------------- helpers
    def _row(self, args, state, gen: dict) -> dict:
        logs, n_expected = gen["logs"], int(args.generation_batch_size)
        mean_len = float(logs["completions/mean_length"])
        tokens, n = gen["tokens"], gen["completions"]
        if n == 0:  # no counting reward function: TRL's float mean × the batch's completions
            tokens, n = round(mean_len * n_expected), n_expected
            self._counted = "completions/mean_length × generation_batch_size (no prereg reward function counted them)"
        elif n != n_expected or abs(tokens - mean_len * n) > max(TOKEN_TOLERANCE, 1e-6 * tokens):
            raise PreregError(f"TRL step {state.global_step}: the reward functions saw {n} completions and {tokens} "
                              f"tokens, TRL logged {n_expected} completions of mean length {mean_len}")
        row = {"iteration": self.counters.iteration, "tokens_rollout": int(tokens), "tokens_continuation": 0,
               "tokens_discarded": 0, "updates": int(state.global_step), "length_mean": tokens / max(n, 1),
               "trl_num_tokens": float(logs.get("num_tokens", float("nan")))}
        for ours, theirs in (("reward_mean", "reward"), ("truncation_rate", "completions/clipped_ratio"),
                             ("trl_loss", "loss"), ("trl_kl", "kl"), ("trl_entropy", "entropy")):
            if logs.get(theirs) is not None:
                row[ours] = float(logs[theirs])
        reward_keys = [k for k in logs if k.startswith("rewards/") and k.endswith("/mean")]
        ours_only = len(reward_keys) == 1 and reward_keys[0].startswith(f"rewards/{BINARY_PREFIX}")
        if ours_only and self._binary and logs.get("frac_reward_zero_std") is not None:
            row["mixed_share"] = 1.0 - float(logs["frac_reward_zero_std"])
        return row

    def _meta(self, args, model) -> RunMeta:
        spec, assets = self.spec, self.assets()
        trained = getattr(model, "name_or_path", "") if model is not None else ""
        if trained and Path(trained).exists() and Path(trained).resolve() != Path(assets.model_path).resolve():
            raise PreregError(f"TRL trains the model at {trained}, but configuration {spec.configuration!r} "
                              f"preregisters {assets.model_path}")
        trl_args = json.loads(json.dumps(args.to_dict(), default=str))
        return RunMeta(study=spec.study, configuration=spec.configuration, seed=spec.seed, stage=spec.stage,
                       plan_hash=spec.plan_hash, config=self.cfg.model_dump(mode="json"), started_at=utc_now(),
                       device=_device(model), tool_version=__version__, trainer="trl", engine="trl",
                       model_path=str(assets.model_path), model_sha256=assets.model_sha256,
                       source={"importer": "PreregCallback", **_versions(), "trl_args": trl_args,
                               "generation_span_steps": self.span,
                               "tokens": self._counted,
                               "seconds": "seconds_step: on_step_begin to on_step_end, unsplit"})

    def _restore(self, at: int) -> None:
        """Counters after ``at`` iterations, from the log's rows that a resume at ``at`` keeps
        (iterations before it, evaluations of policies up to it)."""
        it, _ = read_table(self.run_dir, "iterations")
        ev, _ = read_table(self.run_dir, "evals")
        if self.deferred:  # the evaluation points recorded so far stand in for eval rows
            ev = pd.DataFrame(read_pending(self.run_dir), columns=["eval_index", "iteration", "tokens"])
        if it is not None:
            it = it[it["iteration"] < at]
        if ev is not None:
            ev = ev[ev["iteration"] <= at]
        c = self.counters
        n = 0 if it is None else len(it)
        if n != at:
            raise PreregError(f"{self.run_dir}: the log holds {n} iterations, TRL's checkpoint is at iteration {at}")
        if n:
            c.tokens["rollout"] = int(it["tokens_rollout"].sum())
            c.train_seconds = float(it["seconds_step"].sum())
            c.updates = int(it["updates"].iloc[-1])
        c.iteration = at
        if ev is not None and len(ev):
            c.eval_index = int(ev["eval_index"].max()) + 1
            if self.spec.budget_tokens is not None:
                c.budget_evaluated = bool((ev["tokens"] >= self.spec.budget_tokens).any())
            # the last evaluation is in: the run ended there (a crash before the log was finished)
            c.done = self.schedule.finished(c.total_tokens) and int(ev["iteration"].max()) == at

    def _defer(self, model, row: dict | None, step: int) -> None:
        """Deferred evaluation: record the counters and the checkpoint TRL saves after this log
        (``checkpoint-<step>``; the initial policy is saved here as ``checkpoint-0``)."""
        c = self.counters
        ckpt = self._output_dir / f"checkpoint-{step}"
        if row is None:
            model.save_pretrained(ckpt)
            self.tokenizer.save_pretrained(ckpt)
        entry = {"eval_index": c.eval_index, "iteration": c.iteration, "tokens": c.total_tokens,
                 "train_seconds": c.train_seconds, "updates": c.updates, "checkpoint": str(ckpt.resolve())}
        if row is not None:
            self.writer.log_iteration(row)
        write_pending(self.run_dir, read_pending(self.run_dir) + [entry])
        c.eval_index += 1

    def _report(self, rows: list[dict] | None = None) -> None:
        """A progress line as the built-in trainer writes it (``trainer.progress_lines``): iteration,
        tokens, evaluations; the last evaluation's accuracy outside the main stage only (``rows``:
        the evaluation just logged). In the main stage the accuracy is not even computed."""
        c, p = self.counters, self.job.progress
        p.update(iteration=c.iteration, tokens=c.total_tokens)
        if rows is not None:
            p["eval_index"] = c.eval_index - 1
            if self.spec.stage != "main":
                p["accuracy"] = accuracy(rows, self._eval_sets[0].name)
        self.lines.update(self.job)

    def _done(self, result: str) -> None:
        self.job.result = result
        self.lines.done(self.job)

    def _evaluate(self, model, row: dict | None, step: int = 0) -> list[dict] | None:
        """One evaluation with the built-in evaluator on the live model, timed apart from training;
        its rows (None when deferred: a checkpoint is recorded instead)."""
        if self.deferred:
            self._defer(model, row, step)
            return None
        from trainer.core.engines import HFEngine  # torch, only when evaluating
        from trainer.core.policy import Policy, autocast_dtype

        if self._eval_sets is None:
            self._eval_sets = load_eval_sets(self.spec, self.assets().synthetic_eval)
        tok = self.tokenizer
        side = getattr(tok, "padding_side", "left")
        device = next(model.parameters()).device
        cfg = self.cfg
        if self.eval_batch_size:
            cfg = cfg.model_copy(update={"evaluation": cfg.evaluation.model_copy(update={"batch_size": self.eval_batch_size})})
        policy = Policy(model, tok, device, autocast_dtype(cfg, device), cfg, str(self.assets().model_path))
        spec = self.spec.model_copy(update={"config": cfg})
        kept: list[dict] = []
        c = self.counters

        def record(name, problem, texts) -> None:
            kept.extend({"step": step, "eval_index": c.eval_index, "eval_set": name, "problem_id": problem.id,
                         "input": problem.prompt, "output": t, "answer": problem.answer} for t in texts)

        t0 = _clock()
        try:
            tok.padding_side = "left"  # prompts left-padded so completions start at one column
            rows = run_evaluation(HFEngine(policy), policy, self._eval_sets, c, spec,
                                  record=record if self.outputs is not None else None)
        finally:
            tok.padding_side = side
        secs = _clock() - t0
        c.excluded_seconds["evaluation"] += secs
        c.eval_index += 1
        if row is not None:
            row["seconds_evaluation"] = secs
            self.writer.log_iteration(row)
        self.writer.log_eval_rows(rows)
        if self.outputs is not None:
            with open(self.outputs, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in kept))
        return rows


def _keep_outputs(path: Path, before: int) -> None:
    """Keep the lines of the outputs file of evaluations before ``before`` (a fresh run: none)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() and before else []
    keep = [ln for ln in lines if ln.strip() and json.loads(ln).get("eval_index", before) < before]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(ln + "\n" for ln in keep), encoding="utf-8")
    tmp.replace(path)


def _main(state) -> bool:
    return bool(getattr(state, "is_world_process_zero", True))


def _clock() -> float:
    """Wall seconds, with queued GPU work finished first (so a step's time is the step's)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


def _device(model) -> str:
    try:
        dev = next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return "unknown"
    if dev.type == "cuda":
        import torch

        return f"cuda:{torch.cuda.get_device_name(dev)}"
    return str(dev.type)


def _global_sum(local: tuple[int, int]) -> tuple[int, int]:
    """(tokens, completions) summed over processes (each process's reward function saw its own slice)."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() == 1:
        return local
    t = torch.tensor(list(local), dtype=torch.long, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t)
    return int(t[0]), int(t[1])


def _build() -> type:
    try:
        from transformers import TrainerCallback  # the optional extra: torch
    except ImportError:
        raise PreregError(f"PreregCallback needs TRL and transformers: {EXTRA}") from None
    try:
        import trl  # noqa: F401
    except ImportError:
        raise PreregError(f"PreregCallback needs TRL: {EXTRA}") from None

    class PreregCallback(_PreregCallback, TrainerCallback):
        pass
    PreregCallback.__module__ = __name__
    PreregCallback.__doc__ = __doc__
    return PreregCallback


def __getattr__(name: str):
    # The class derives from transformers' TrainerCallback, built on first use so that this module
    # imports (docs, the CLI) without torch or TRL.
    if name == "PreregCallback":
        cls = _build()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EXTRA", "PreregCallback", "check_args", "generation_span"]  # noqa: F822 — PreregCallback: module __getattr__
