"""Held-out evaluation: per-problem correct counts under the default and the strict verifier.

Dense-rewards paper §2.3 "Metric", §C.1 "Pools and evaluation" and "Verifiers": at the start and every B/16 generated
tokens, 8 samples per problem at temperature 1 and top-p 1 on each evaluation set, with common
random numbers across the configurations of a seed; accuracy is the mean over problems of the
fraction correct under the default verifier; the strict verifier (boxed answers only) and
greedy accuracy are secondary. The sampling seed of evaluation ``e`` on set ``S`` is
``derive_seed(run seed, e, "eval:S")`` and request ``i·samples + k`` (problem i, sample k) has its
own random numbers, so the draws do not depend on the batch layout or on the configuration.

Code tasks (``task = "code"``; multi-reward paper App. C.4, docs/multi-reward.md "Program channels
in training"): every sample's program is judged in the sandbox on its problem's tests (distinct
programs once, bounded concurrency). ``correct`` = samples whose program passes every test, so
accuracy and pass@k read as for math; ``correct_strict`` = ``correct`` (the judge has no strict
variant); ``boxed`` = samples with a fenced code block (the format the extractor reads).
``ch_program_fast`` / ``ch_correct_program_fast`` count fast (T < threshold) and correct-and-fast
samples. The paper's evaluation "fast" (correct and faster than the problem's reference solution,
timed by the same judge) needs reference timings and is not computed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from trainer.config import ConfigError, EvalSetSpec, RunSpec, derive_seed
from trainer.core.budget import Counters
from trainer.core.program_judge import make_sandbox
from trainer.data.problems import Problem, load_problems
from trainer.data.verifiers import get_verifier, has_boxed
from trainer.rewards.channels import Channel, Completion, get_channel, has_program, judge_programs, score_channels
from trainer.rewards.sandbox import ProgramResult
from trainer.rewards.spec import CODE_DEFAULT_CHANNEL, build_channels


@dataclass(frozen=True)
class EvalSet:
    name: str
    problems: tuple[Problem, ...]
    at: tuple[str, ...] | None = None  # None: every evaluation; else "start" and/or "B" only


def scored_now(at, eval_index: int, at_budget: bool) -> bool:
    """Whether a set is scored at this evaluation: every evaluation, or only at the start
    (evaluation 0) and/or at the first evaluation at or after B (the further test sets of S33/S34)."""
    return at is None or (eval_index == 0 and "start" in at) or (at_budget and "B" in at)


def log_length(lengths: Sequence[int]) -> float:
    """Mean over the samples of ln(completion tokens), 0 tokens counted as 1 (S5's log length)."""
    return float(np.mean(np.log(np.maximum(np.asarray(lengths, dtype="float64"), 1.0))))


def load_eval_sets(spec: RunSpec, synthetic_eval: Path | None) -> list[EvalSet]:
    """The plan's evaluation sets. ``source`` is ``synthetic:eval`` (the task's held-out set) or
    a MATH/GSM8K-layout file relative to the study folder; ``levels`` and ``n_problems`` keep the
    listed levels, then the first n problems (a fixed set, the same for every run)."""
    out = []
    code = spec.config.task.name == "code"
    for s in spec.eval_sets:
        probs = tuple(_problems(s, spec, synthetic_eval))
        wrong = [p.id for p in probs if p.is_code != code]
        if wrong:  # a math set in a code run (or the reverse) has nothing the judge could score
            raise ConfigError(f"evaluation set {s.name!r}: problem {wrong[0]!r} is {'math' if code else 'code'}; "
                              f"task = {spec.config.task.name!r} evaluates {'code' if code else 'math'} problems only")
        out.append(EvalSet(s.name, probs, tuple(s.at) if s.at is not None else None))
    return out


def _problems(s: EvalSetSpec, spec: RunSpec, synthetic_eval: Path | None) -> list[Problem]:
    src = s.source or "synthetic:eval"
    if src.startswith("synthetic"):
        if synthetic_eval is None:
            raise ConfigError(f"evaluation set {s.name!r}: source {src!r} needs the built-in task "
                              "(task = 'synthetic', or 'code' without train_file)")
        path = synthetic_eval
    else:
        path = Path(src) if Path(src).is_absolute() else Path(spec.study_dir) / src
        if not path.exists():
            raise ConfigError(f"evaluation set {s.name!r}: no such file {path}")
    pool = load_problems(path, source=s.name)
    if s.levels:
        pool = pool.with_levels(s.levels)
    probs = list(pool)
    if s.n_problems is not None:
        if len(probs) < s.n_problems:
            raise ConfigError(f"evaluation set {s.name!r}: {path} has {len(probs)} problems, the plan asks for {s.n_problems}")
        probs = probs[: s.n_problems]
    return probs


def evaluate(engine, policy, sets: Sequence[EvalSet], counters: Counters, spec: RunSpec,
             sandbox=None, record=None) -> list[dict]:
    """One evaluation of the current policy on every set: one row per problem (run-log columns).
    Code sets are judged with ``sandbox`` (the run's; made from the recipe when None).
    ``record``: called as ``record(set_name, problem, texts)`` with each problem's sampled
    completions, for a caller that keeps the outputs themselves."""
    cfg = spec.config
    default, strict = get_verifier("default"), get_verifier("strict")
    n = spec.eval_samples
    aux = eval_channels(cfg)  # multi-reward: ch_<name> and ch_correct_<name> counts
    rows: list[dict] = []
    # the first evaluation at or after B, on the budget's axis (generated tokens or iterations)
    reached = (counters.total_tokens >= spec.budget_tokens if spec.budget_tokens is not None
               else counters.iteration >= (spec.budget_iterations or 0))
    at_budget = not counters.budget_evaluated and reached
    for es in sets:
        if not scored_now(es.at, counters.eval_index, at_budget):
            continue
        seed = derive_seed(spec.seed, counters.eval_index, f"eval:{es.name}")
        rendered = [policy.render(p.prompt) for p in es.problems]
        prompts = [r for r in rendered for _ in range(n)]
        roll = engine.generate(prompts, noise_seed=seed, keys=range(len(prompts)), limit=cfg.rollout.completion_limit,
                               temperature=spec.eval_temperature, top_p=spec.eval_top_p,
                               batch_size=cfg.evaluation.batch_size)
        greedy = None
        if spec.eval_greedy:
            greedy = engine.generate(rendered, noise_seed=seed, keys=range(len(rendered)), limit=cfg.rollout.completion_limit,
                                     temperature=0.0, top_p=1.0, batch_size=cfg.evaluation.batch_size).texts
        programs = greedy_programs = None
        if any(p.is_code for p in es.problems):
            sandbox = sandbox or make_sandbox(cfg)
            programs = judge_programs(sandbox, roll.texts, [p for p in es.problems for _ in range(n)])
            if greedy is not None:
                greedy_programs = judge_programs(sandbox, greedy, list(es.problems))
        memo: dict[tuple[str, str, str], bool] = {}

        def check(name: str, verifier, text: str, answer: str, memo=memo) -> bool:  # identical samples checked once
            key = (name, text, answer)
            if key not in memo:
                memo[key] = bool(verifier(text, answer))
            return memo[key]

        for i, p in enumerate(es.problems):
            texts = roll.texts[i * n:(i + 1) * n]
            if record is not None:
                record(es.name, p, texts)
            if programs is not None:
                rows.append(_code_row(counters, es.name, seed, p, n, texts, programs[i * n:(i + 1) * n],
                                      None if greedy_programs is None else greedy_programs[i],
                                      aux, roll.lengths[i * n:(i + 1) * n].tolist()))
                continue
            row = {
                "eval_index": counters.eval_index, "iteration": counters.iteration, "eval_set": es.name,
                "problem_id": p.id, "eval_seed": seed, "tokens": counters.total_tokens,
                "train_seconds": counters.train_seconds, "updates": counters.updates, "samples": n,
                "correct": sum(check("default", default, t, p.answer) for t in texts),
                "correct_strict": sum(check("strict", strict, t, p.answer) for t in texts),
                "boxed": sum(has_boxed(t) for t in texts),
                "log_length": log_length(roll.lengths[i * n:(i + 1) * n].tolist()),
            }
            if p.level is not None:
                row["level"] = int(p.level)
            if greedy is not None:
                row["greedy_correct"] = bool(default(greedy[i], p.answer))
            row.update(eval_channel_counts(aux, texts, roll.lengths[i * n:(i + 1) * n].tolist(), p,
                                           [check("default", default, t, p.answer) for t in texts]))
            rows.append(row)
    if at_budget:
        counters.budget_evaluated = True
    return rows


def _code_row(counters: Counters, set_name: str, seed: int, p: Problem, n: int, texts, programs, greedy,
              aux, lengths) -> dict:
    """One code problem's eval row: ``correct`` = programs passing every test (see the module doc)."""
    ok = [r.passed for r in programs]
    row = {
        "eval_index": counters.eval_index, "iteration": counters.iteration, "eval_set": set_name,
        "problem_id": p.id, "eval_seed": seed, "tokens": counters.total_tokens,
        "train_seconds": counters.train_seconds, "updates": counters.updates, "samples": n,
        "correct": sum(ok), "correct_strict": sum(ok), "boxed": sum(has_program(t) for t in texts),
    }
    if greedy is not None:
        row["greedy_correct"] = bool(greedy.passed)
    row.update(eval_channel_counts(aux, texts, lengths, p, ok, programs=programs))
    return row


def accuracy(rows: Sequence[dict], eval_set: str | None = None) -> float:
    """Mean over problems of the fraction correct (default verifier)."""
    sel = [r for r in rows if eval_set is None or r["eval_set"] == eval_set]
    return sum(r["correct"] / r["samples"] for r in sel) / max(1, len(sel))


def eval_channels(cfg) -> list[Channel]:
    """The auxiliary channels counted at evaluation. Math: the recipe's non-correct channels, and
    ``negative`` always (cheap; threshold-free). Code: the recipe's channels other than
    ``program_correct`` (that is ``correct``), and ``program_fast`` always (the recipe's threshold
    if it sets one, else 60 ms). ``brief`` only when the recipe sets one (its threshold is the
    recipe's)."""
    out: dict[str, Channel] = {}
    code = cfg.task.name == "code"
    for ch in (build_channels(cfg) if cfg.rewards.channels else []):
        if ch.name not in ("correct", CODE_DEFAULT_CHANNEL) and (code or not ch.needs_program):
            out[ch.name] = ch
    if code:
        out.setdefault("program_fast", get_channel("program_fast"))
    else:
        out.setdefault("negative", get_channel("negative"))
    return list(out.values())


def eval_channel_counts(channels: Sequence[Channel], texts: Sequence[str], lengths: Sequence[int], problem: Any,
                        correct: Sequence[bool], programs: Sequence[ProgramResult] | None = None) -> dict[str, int]:
    """Per-problem eval-row columns: ``ch_<name>`` = samples with channel = 1 and
    ``ch_correct_<name>`` = samples correct (default verifier; code: every test passed) with
    channel = 1. Program channels read ``programs`` (one sandbox result per sample)."""
    row: dict[str, int] = {}
    if not channels:
        return row
    S = score_channels(channels, [Completion(t, int(n)) for t, n in zip(texts, lengths)], [problem] * len(texts),
                       programs=programs)
    ok = np.asarray(correct, dtype=bool)
    for k, ch in enumerate(channels):
        hit = S[:, k] > 0
        row[f"ch_{ch.name}"] = int(hit.sum())
        row[f"ch_correct_{ch.name}"] = int((hit & ok).sum())
    return row
