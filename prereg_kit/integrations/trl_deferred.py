"""Deferred evaluation of a TRL run: ``PreregCallback(evaluate="deferred")`` asks TRL for a
checkpoint at each evaluation point and records which checkpoint is which evaluation;
``prereg evaluate-checkpoints STUDY`` scores them later with the built-in evaluator.

The evaluation is the same as a live one (dense-rewards paper §2.3 "Metric", §C.1 "Pools and evaluation"): the
plan's sets, samples, temperature, top-p and verifiers, sampling seed ``derive_seed(seed, e,
"eval:<set>")`` for evaluation ``e``, and the counters (generated tokens, training seconds,
updates) the run had reached when the checkpoint was taken. Deferring moves evaluation off the
training machine; it changes neither the draws nor the numbers the analysis reads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from prereg_kit.chain.seal import seal_runs
from prereg_kit.errors import PreregError
from prereg_kit.runlog import RunLogWriter, read_meta, utc_now
from prereg_kit.study.jobs import stage_runs
from trainer.core.assets import prepare_assets, synthetic_eval_size
from trainer.core.budget import Counters
from trainer.core.evaluate import evaluate, load_eval_sets
from trainer.launch import plan_jobs

PENDING_FILE = "deferred_evals.jsonl"  # one line per evaluation point: counters and checkpoint
_log = logging.getLogger(__name__)


def read_pending(run_dir: str | Path) -> list[dict]:
    """The evaluation points a deferred run recorded, in order."""
    path = Path(run_dir) / PENDING_FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_pending(run_dir: str | Path, entries: list[dict]) -> None:
    path = Path(run_dir) / PENDING_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(e) + "\n" for e in entries))
    tmp.replace(path)


def evaluate_checkpoints(study_dir: str | Path, *, stage: str = "main",
                         log: Callable[[str], None] | None = None) -> list[Path]:
    """Score every deferred run of the stage whose training ended complete: each recorded
    checkpoint in order, eval rows appended to its log, the run finished and (main stage)
    sealed. Returns the run folders completed. ``log``: where a line per checkpoint scored goes
    (default: the ``prereg_kit`` logger); the lines name checkpoints, never an accuracy."""
    log = log or _log.info
    from trainer.core.engines import HFEngine  # torch, only when evaluating
    from trainer.core.policy import load_policy

    _, runs = stage_runs(study_dir, stage)
    done = []
    for run in runs:
        pending = read_pending(run.folder)
        if not pending or not (run.folder / "meta.json").exists():
            continue
        meta = read_meta(run.folder)
        if meta.status == "complete" or not meta.source.get("training_done"):
            continue  # complete already, or training has not reached train_to yet
        _, jobs = plan_jobs(study_dir, stage, [run.configuration], [run.seed])
        spec = jobs[0].spec
        cfg = spec.config
        n_eval = synthetic_eval_size(spec.eval_sets)
        sets = load_eval_sets(spec, prepare_assets(cfg, spec.cache_dir, spec.study_dir, n_eval).synthetic_eval)
        with RunLogWriter(run.folder, None, resume=True) as writer:
            c = Counters()
            for e in pending:
                if e["eval_index"] <= writer.last_eval:  # scored by an earlier, interrupted call
                    c.budget_evaluated |= spec.budget_tokens is not None and e["tokens"] >= spec.budget_tokens
                    continue
                ckpt = Path(e["checkpoint"])
                if not (ckpt / "config.json").is_file():
                    raise PreregError(f"{run.folder / PENDING_FILE}: evaluation {e['eval_index']}: checkpoint {ckpt} "
                                      "is missing (was it removed by save_total_limit?)")
                c.eval_index, c.iteration, c.updates = e["eval_index"], e["iteration"], e["updates"]
                c.tokens["rollout"], c.train_seconds = e["tokens"], e["train_seconds"]
                policy = load_policy(cfg, ckpt)
                writer.log_eval_rows(evaluate(HFEngine(policy), policy, sets, c, spec))
                log(f"{run.folder}: evaluation {e['eval_index']} (iteration {e['iteration']}) scored from {ckpt}")
            writer.meta = writer.meta.model_copy(update={"ended_at": utc_now()})
            writer.finish("complete")
        if stage == "main":
            res = seal_runs(study_dir, [run.folder])
            if res.refused:
                raise PreregError(f"{run.folder}: evaluated but not sealed: {res.refused[0]}")
        done.append(run.folder)
    return done


__all__ = ["PENDING_FILE", "evaluate_checkpoints", "read_pending", "write_pending"]
