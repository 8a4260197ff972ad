"""GPU path check: the paper's iteration on a Qwen2.5-1.5B-shaped model, HF and vLLM engines.

Dense-rewards paper §2.3 and §C.1 "Implementation": 8 prompts × 8 samples × up to 380
completion tokens per iteration, eq. (1) advantages of a 0/1 reward, one Adam step on the
−Σ c log π loss with float32 master weights under bf16 autocast, then the weights synced into
the generation engine. The paper reports 12.25M generated tokens in 0.43 h on one H200 for
outcome-only GRPO (about 7,900 generated tokens per second, training included).

What runs is the trainer's own code: ``load_policy`` (float32 weights, bf16 autocast on GPU),
``make_engine`` (HF ``generate`` or vLLM), ``compute_credit("outcome", …)`` (eq. 1-2),
``make_optimizer`` / ``update_step``, ``Engine.sync_weights``, timed by ``StageClock`` and
accounted by ``Counters.add_iteration`` exactly as ``trainer.loop`` does. Only the model and the
data are made up: a model of Qwen2.5-1.5B's shape with random weights (no download) and a
byte-level tokenizer of its vocabulary size built locally, saved to a temporary folder that both
engines load; prompts are random text and the reward a seeded coin.

Completions are forced to the full limit (EOS masked: HF ``min_new_tokens``, vLLM ``min_tokens``)
so throughput is comparable across engines and with the paper; ``--natural-length`` leaves EOS on.

Checks (exit 1 when one fails): for every generation call, the tokens the trainer's accounting
counts (``tokens_rollout`` of the run-log row, from ``Rollouts.lengths``) equal a count made
independently from the engine's raw token ids (up to and including the first EOS, at most the
limit), completion by completion; with both engines, one call each from the same weights, counted
by that same rule. Prints generated tokens per second (training included), each stage's share,
peak GPU memory and the ratio to the paper's figure; writes every figure to a JSON file.

Runtime on one H200 (estimate; not yet measured): model build and save ~20 s, HF iterations
~6-12 s each (380 decoding steps at ~15-30 ms: launch-bound at batch 64, float32 weights cast to
bf16 under autocast at every step), vLLM start ~1-2 min, its iterations ~3-5 s. ``--deadline-s``
(default 450) bounds the whole: the HF phase stops timing new iterations at 45% of it when vLLM
follows, each phase at the deadline, and the summary says how many iterations were timed.

    bash benchmarks/gpu_check.sh                       # the H200 check (timeout, log and JSON)
    python benchmarks/gpu_check.py --tiny --engines hf --iterations 2   # 2-layer model, CPU or GPU
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's code, whatever is installed

PAPER_TOKENS, PAPER_HOURS = 12_250_000, 0.43  # outcome-only GRPO on one H200 (dense-rewards paper, §3.2)
PAPER_TOKENS_PER_S = PAPER_TOKENS / (PAPER_HOURS * 3600)  # ≈ 7,913
STAGES = ("selection", "generation", "credit", "update", "weight_sync")
CROSS_INDEX = 1_000_000  # the cross-engine call's prompts and seeds: apart from every iteration's

# Qwen2.5-1.5B's config.json (the shape only; weights are random)
QWEN25_1_5B = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                   num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                   tie_word_embeddings=True, rms_norm_eps=1e-6)
TINY = dict(QWEN25_1_5B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048)
PAD, EOS = "<|endoftext|>", "<|im_end|>"  # Qwen2.5's pad and chat EOS tokens

SUMMARY_FIELDS = ("schema", "date", "ok", "accounting_ok", "tiny", "forced_full_length", "device", "versions",
                  "model", "iteration", "paper", "engines", "cross_engine", "elapsed_seconds")
ENGINE_FIELDS = ("status", "iterations_warmup", "iterations_timed", "cut_short", "tokens_timed", "train_seconds_timed",
                 "tokens_per_second", "generation_tokens_per_second", "ratio_to_paper", "stage_seconds_mean",
                 "stage_shares", "peak_gpu_memory_gib", "max_rss_mib", "accounting", "rows")


# --------------------------------------------------------------------------------------------
# The model folder: config, random weights, tokenizer
# --------------------------------------------------------------------------------------------
def build_tokenizer(vocab_size: int):
    """A byte-level BPE tokenizer with ``vocab_size`` entries (256 bytes, fillers, PAD and EOS
    last) and no merges, so a prompt's tokens are its bytes. AutoTokenizer loads it as Qwen2's own
    tokenizer class (what vLLM and ``load_policy`` call), which a word-level vocabulary does not survive."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for i in range(len(vocab), vocab_size - 2):
        vocab[f"w{i}"] = i  # every id decodes: the random model draws them all
    vocab[PAD], vocab[EOS] = vocab_size - 2, vocab_size - 1
    tk = Tokenizer(models.BPE(vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(PAD, special=True), AddedToken(EOS, special=True)])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=EOS, pad_token=PAD)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # Policy.render's path
    return tok


def build_model_folder(folder: Path, shape: dict, seed: int, device: str) -> dict:
    """Save a Qwen2 causal LM of ``shape`` with seeded random weights (bf16 on disk, like Qwen's
    own checkpoint: half the bytes to write and read) and its tokenizer into ``folder``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    t0 = time.perf_counter()
    tok = build_tokenizer(shape["vocab_size"])
    tok.save_pretrained(str(folder))
    config = Qwen2Config(**shape, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    with torch.device(device):  # initialised where it will run: seconds on a GPU, not minutes on a CPU
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.to(torch.bfloat16).save_pretrained(str(folder))
    n = sum(p.numel() for p in model.parameters())
    del model
    return {"parameters": int(n), "shape": shape, "build_seconds": time.perf_counter() - t0}


def prompt_texts(seed: int, iteration: int, n: int, chars: tuple[int, int]) -> list[str]:
    """``n`` random lower-case texts of ``chars`` bytes (= tokens), seeded by (seed, iteration)."""
    rng = np.random.default_rng([seed, iteration, 1])
    out = []
    for _ in range(n):
        k = int(rng.integers(chars[0], chars[1] + 1))
        letters = rng.choice(list("abcdefghijklmnopqrstuvwxyz     "), size=k)
        out.append("".join(letters).strip().ljust(k, "x"))
    return out


# --------------------------------------------------------------------------------------------
# Raw completions and the independent count
# --------------------------------------------------------------------------------------------
def counted_length(ids: list[int], eos: int, limit: int) -> int:
    """Generated tokens of one completion by paper §2.3's rule: up to and including the first
    EOS; without EOS, all it generated, at most the limit (padding after EOS is not generated)."""
    for i, t in enumerate(ids[:limit]):
        if t == eos:
            return i + 1
    return min(len(ids), limit)


@dataclass
class Capture:
    """The engines' raw completions of the last generation call, as the generator returned them."""

    rows: list[list[int]] = field(default_factory=list)
    force: bool = True


def hook_hf(policy, cap: Capture) -> None:
    """Record HF ``generate``'s raw output (and, forced, mask EOS until the limit)."""
    orig = policy.model.generate

    def generate(*args, **kw):
        if cap.force:
            kw["min_new_tokens"] = kw["generation_config"].max_new_tokens
        out = orig(*args, **kw)
        cap.rows.extend(out[:, kw["input_ids"].shape[1]:].tolist())
        return out

    policy.model.generate = generate


def hook_vllm(engine, cap: Capture) -> None:
    """Record vLLM's raw token ids (and, forced, ask for ``min_tokens`` = the limit)."""
    from vllm import SamplingParams

    orig = engine.llm.generate

    def generate(prompts, params, use_tqdm=False):
        if cap.force:
            params = [SamplingParams(n=1, temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_tokens,
                                     min_tokens=p.max_tokens, seed=p.seed) for p in params]
        outs = orig(prompts, params, use_tqdm=use_tqdm)
        cap.rows.extend(list(o.outputs[0].token_ids) for o in outs)
        return outs

    engine.llm.generate = generate


def check_accounting(roll, row_tokens: int, raw: list[list[int]], eos: int, limit: int, forced: bool) -> list[str]:
    """Where the trainer's count of one call (``row_tokens``, its lengths, mask and truncation
    flags) differs from the count of the raw completions; empty when they agree."""
    bad = []
    if len(raw) != roll.n:
        return [f"{len(raw)} raw completions for {roll.n} rollouts"]
    mine = [counted_length(r, eos, limit) for r in raw]
    theirs = [int(x) for x in roll.lengths.tolist()]
    diff = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    if diff:
        i = diff[0]
        bad.append(f"{len(diff)} completions counted differently (first: #{i}, raw {mine[i]} vs trainer {theirs[i]})")
    if sum(mine) != row_tokens:
        bad.append(f"tokens_rollout {row_tokens} != {sum(mine)} counted from the raw token ids")
    if int(roll.completion_mask.sum()) != row_tokens:
        bad.append(f"completion mask covers {int(roll.completion_mask.sum())} tokens, tokens_rollout {row_tokens}")
    trunc = [eos not in r[:limit] and n == limit for r, n in zip(raw, mine)]
    if trunc != [bool(t) for t in roll.truncated.tolist()]:
        bad.append("truncation flags differ from 'no EOS within the limit'")
    if forced and any(n != limit for n in mine):
        bad.append(f"forced full length, but {sum(n != limit for n in mine)} completions are shorter than {limit}")
    return bad


# --------------------------------------------------------------------------------------------
# One engine's phase: warm-up and timed iterations of the trainer's loop body
# --------------------------------------------------------------------------------------------
def trainer_config(args, engine: str):
    from trainer.config import TrainerConfig

    return TrainerConfig(rollout={"prompts_per_iteration": args.prompts, "group_size": args.group_size,
                                  "completion_limit": args.limit},
                         update={"micro_batch_size": args.micro_batch},
                         engine={"name": engine, "device": args.device,
                                 "vllm_gpu_memory_utilization": args.vllm_memory})


def run_phase(args, folder: Path, engine_name: str, deadline: float, cross: dict | None) -> dict:
    """Load the policy and engine from ``folder`` and run warm-up + timed iterations."""
    import torch

    from trainer.config import derive_seed
    from trainer.core.budget import Counters, StageClock
    from trainer.core.credit import CreditContext
    from trainer.core.engines import HFEngine, make_engine
    from trainer.core.policy import load_policy, set_determinism, synchronize
    from trainer.core.update import learning_rate_at, make_optimizer, update_step
    from trainer.interventions.credit_rules import compute_credit

    cfg = trainer_config(args, engine_name)
    policy = load_policy(cfg, folder)
    set_determinism(cfg, policy.device)
    cuda = policy.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    cap = Capture(force=not args.natural_length)
    hook_hf(policy, cap)
    engine = make_engine(policy)
    if engine_name == "vllm":
        hook_vllm(engine, cap)
    optimizer = make_optimizer(policy)
    device = policy.device  # bound here: the policy is deleted at the end of the phase
    clock, counters = StageClock(sync=lambda: synchronize(device)), Counters()
    G, N, L, eos = args.group_size, args.prompts * args.group_size, args.limit, policy.eos_id
    accounting: list[str] = []

    def generate(eng, prompts, it):
        cap.rows.clear()
        return eng.generate(prompts, noise_seed=derive_seed(args.seed, it, "rollout"), keys=range(len(prompts)),
                            limit=L, temperature=1.0, top_p=1.0)

    if cross is not None:  # one call of each engine from the same (freshly loaded) weights
        prompts = [policy.render(p) for p in prompt_texts(args.seed, CROSS_INDEX, args.prompts, args.prompt_chars)
                   for _ in range(G)]
        for name, eng in (("hf", HFEngine(policy)), (engine_name, engine)):
            roll = generate(eng, prompts, CROSS_INDEX)
            bad = check_accounting(roll, roll.tokens, cap.rows, eos, L, cap.force)
            cross[name] = {"tokens": roll.tokens, "length_mean": float(roll.lengths.float().mean()),
                           "eos_share": float(1 - roll.truncated.float().mean()), "accounting": bad or "ok"}
            accounting += [f"cross-engine {name}: {b}" for b in bad]

    rows, t_start, cut = [], time.perf_counter(), False
    total = args.warmup + args.iterations
    for it in range(total):
        if rows and it >= args.warmup and time.perf_counter() + rows[-1]["seconds_wall"] > deadline:
            cut = True  # the next iteration would end past this phase's share of the deadline
            break
        t0 = time.perf_counter()
        clock.reset()
        with clock.stage("selection"):
            prompts = [policy.render(p) for p in prompt_texts(args.seed, it, args.prompts, args.prompt_chars) for _ in range(G)]
        with clock.stage("generation"):
            roll = generate(engine, prompts, it)
        raw = [list(r) for r in cap.rows]
        with clock.stage("credit"):  # a seeded 0/1 reward, eq. (1) advantages, outcome credit (eq. 2)
            rewards = torch.from_numpy(np.random.default_rng([args.seed, it, 2]).integers(0, 2, N)).float()
            ctx = CreditContext.of(rewards, roll.completion_mask, group_size=G, eps=cfg.credit.advantage_eps,
                                   cfg=cfg, rollouts=roll, policy=policy, engine=engine)
            credit = compute_credit(cfg.credit.rule, ctx)
        with clock.stage("update"):
            stats = update_step(policy, optimizer, roll, credit.tokens, learning_rate_at(cfg, counters.total_tokens, PAPER_TOKENS))
        with clock.stage("weight_sync"):
            engine.sync_weights()
        row = counters.add_iteration({"rollout": roll.tokens, "continuation": credit.continuation_tokens, "discarded": 0},
                                     clock.seconds, updates=1)  # as trainer.loop accounts an iteration
        bad = check_accounting(roll, row["tokens_rollout"], raw, eos, L, cap.force)
        accounting += [f"iteration {it}: {b}" for b in bad]
        row.update(seconds_wall=time.perf_counter() - t0, warmup=it < args.warmup, loss=stats["loss"],
                   grad_norm=stats["grad_norm"], length_mean=float(roll.lengths.float().mean()))
        rows.append(row)
        print(f"  {engine_name} iteration {it}{' (warm-up)' if it < args.warmup else ''}: {row['tokens_rollout']} tokens, "
              f"{sum(row['seconds_' + s] for s in STAGES):.2f} s training"
              f" (generation {row['seconds_generation']:.2f} s, update {row['seconds_update']:.2f} s,"
              f" sync {row['seconds_weight_sync']:.2f} s)", flush=True)
    timed = [r for r in rows if not r["warmup"]]
    out = summarize(timed, args, cut)
    out.update(iterations_warmup=sum(r["warmup"] for r in rows), phase_seconds=time.perf_counter() - t_start,
               peak_gpu_memory_gib=torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
               gpu_memory_in_use_gib=(lambda f: (f[1] - f[0]) / 2**30)(torch.cuda.mem_get_info()) if cuda else None,
               max_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               accounting={"ok": not accounting, "calls_checked": len(rows) + (2 if cross is not None else 0),
                           "problems": accounting[:20]}, rows=rows, status="ran")
    del engine, optimizer, policy
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out


def summarize(timed: list[dict], args, cut: bool) -> dict:
    """Tokens per second over the timed iterations (training stages included) and stage shares."""
    tokens = sum(r["tokens_rollout"] for r in timed)
    secs = {s: sum(r["seconds_" + s] for r in timed) for s in STAGES}
    train = sum(secs.values())
    tps = tokens / train if train > 0 else None
    return {"iterations_timed": len(timed), "cut_short": cut, "tokens_timed": tokens, "train_seconds_timed": train,
            "tokens_per_second": tps,
            "generation_tokens_per_second": tokens / secs["generation"] if secs["generation"] > 0 else None,
            "ratio_to_paper": tps / PAPER_TOKENS_PER_S if tps else None,
            "stage_seconds_mean": {s: secs[s] / len(timed) for s in STAGES} if timed else {},
            "stage_shares": {s: secs[s] / train for s in STAGES} if train > 0 else {}}


# --------------------------------------------------------------------------------------------
# The whole check
# --------------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a 2-layer, hidden-64 Qwen2 with a 512-token vocabulary")
    ap.add_argument("--engines", default="hf,vllm", help="comma-separated: hf, vllm (vLLM skipped when not installed)")
    ap.add_argument("--iterations", type=int, default=5, help="timed iterations per engine")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations before them")
    ap.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="the JSON summary")
    ap.add_argument("--deadline-s", type=float, default=450.0, help="stop timing new iterations past this")
    ap.add_argument("--natural-length", action="store_true", help="let completions end at EOS (default: full limit)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--limit", type=int, default=380)
    ap.add_argument("--micro-batch", type=int, default=None, help="completions per forward/backward (default 16; tiny: all)")
    ap.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM's share of GPU memory (the trainer's default)")
    args = ap.parse_args(argv)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not args.engines or any(e not in ("hf", "vllm") for e in args.engines):
        ap.error(f"--engines: expected a comma-separated list of hf, vllm; got {','.join(args.engines)!r}")
    if args.micro_batch is None:
        args.micro_batch = 0 if args.tiny else 16  # 16 × 530 tokens × 151,936 float32 logits ≈ 5 GiB a copy
    args.prompt_chars = (20, 60) if args.tiny else (100, 200)  # the paper's MATH prompts: ~100-200 tokens
    return args


def vllm_version() -> str | None:
    """vLLM's version, or None when it does not import (the H200 image here has none)."""
    try:
        import vllm
    except ImportError:
        return None
    return str(getattr(vllm, "__version__", "unknown"))


def write(path: Path, summary: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    deadline = t0 + args.deadline_s
    import torch
    import transformers

    from trainer.core.policy import quiet_transformers

    quiet_transformers()
    cuda = torch.cuda.is_available() and args.device != "cpu"
    device = f"cuda:{torch.cuda.get_device_name(0)}" if cuda else f"cpu ({platform.processor() or platform.machine()})"
    vver = vllm_version() if "vllm" in args.engines else None
    summary = {"schema": "gpu_check/1", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "ok": False,
               "accounting_ok": False, "tiny": args.tiny, "forced_full_length": not args.natural_length, "device": device,
               "versions": {"python": platform.python_version(), "torch": torch.__version__,
                            "transformers": transformers.__version__, "vllm": vver},
               "iteration": {"prompts": args.prompts, "group_size": args.group_size, "limit": args.limit,
                             "warmup": args.warmup, "timed": args.iterations, "micro_batch": args.micro_batch,
                             "precision": "bf16 autocast, float32 master weights" if cuda else "float32 (CPU)"},
               "paper": {"tokens": PAPER_TOKENS, "hours": PAPER_HOURS, "tokens_per_second": PAPER_TOKENS_PER_S},
               "engines": {}, "cross_engine": {"status": "not run: needs both engines"}}
    print(f"GPU path check on {device}; torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        folder = Path(tmp) / "model"
        summary["model"] = build_model_folder(folder, TINY if args.tiny else QWEN25_1_5B, args.seed,
                                              "cuda" if cuda else "cpu")
        print(f"model: {summary['model']['parameters'] / 1e6:.1f}M parameters, built and saved in "
              f"{summary['model']['build_seconds']:.1f} s", flush=True)
        runnable = [e for e in args.engines if e == "hf" or vver is not None]
        for name in args.engines:
            if name not in runnable:
                print("vLLM: not installed — skipped", flush=True)
                summary["engines"][name] = {"status": "skipped: vLLM not installed"}
                continue
            later = len(runnable) - runnable.index(name) - 1
            phase_end = deadline if not later else t0 + args.deadline_s * 0.45
            cross = {} if name == "vllm" and "hf" in args.engines else None
            print(f"{name}: {args.warmup} warm-up + {args.iterations} timed iterations", flush=True)
            try:
                summary["engines"][name] = run_phase(args, folder, name, phase_end, cross)
            except Exception as exc:  # noqa: BLE001 - keep the other engine's figures; the check fails
                summary["engines"][name] = {"status": f"failed: {type(exc).__name__}: {exc}"}
                print(f"{name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
            if cross is not None:
                summary["cross_engine"] = dict(cross, status="ran", same_rule="counted_length (first EOS inclusive, at most the limit)")
            summary["elapsed_seconds"] = time.perf_counter() - t0
            write(args.out, summary)
    ran = [e for e in summary["engines"].values() if e.get("status") == "ran"]
    failed = [n for n, e in summary["engines"].items() if str(e.get("status", "")).startswith("failed")]
    summary["accounting_ok"] = bool(ran) and all(e["accounting"]["ok"] for e in ran)
    summary["ok"] = summary["accounting_ok"] and not failed
    summary["elapsed_seconds"] = time.perf_counter() - t0
    write(args.out, summary)
    report(summary)
    return 0 if summary["ok"] else 1


def report(s: dict) -> None:
    """The figures, one engine per block, beside the paper's."""
    print(f"\n== GPU path check ({s['device']}) — paper: {s['paper']['tokens_per_second']:,.0f} generated tokens/s "
          f"(12.25M tokens in 0.43 h, one H200, training included)")
    for name, e in s["engines"].items():
        if e.get("status") != "ran":
            print(f"{name}: {e.get('status')}")
            continue
        tps = e["tokens_per_second"]
        if tps is None:  # the deadline came before the first timed iteration
            print(f"{name}: no timed iteration (deadline); accounting {'OK' if e['accounting']['ok'] else 'FAILED'}")
            continue
        print(f"{name}: {tps:,.0f} tokens/s training included ({e['ratio_to_paper']:.2f}× the paper), "
              f"generation alone {e['generation_tokens_per_second']:,.0f} tokens/s; "
              f"{e['iterations_timed']} timed iterations{' (cut short by the deadline)' if e['cut_short'] else ''}")
        print("  shares: " + ", ".join(f"{k} {v:.1%}" for k, v in e["stage_shares"].items()))
        mem = e["peak_gpu_memory_gib"]
        print(f"  peak GPU memory (torch allocated): {mem:.1f} GiB" if mem is not None else
              f"  peak GPU memory: — (CPU); max RSS {e['max_rss_mib']:.0f} MiB")
        acc = e["accounting"]
        print(f"  token accounting: {'OK' if acc['ok'] else 'FAILED'} over {acc['calls_checked']} generation calls")
        for p in acc["problems"]:
            print(f"    {p}")
    print(f"cross-engine: {s['cross_engine'].get('status')}")
    print(f"{'OK' if s['ok'] else 'FAILED'} in {s['elapsed_seconds']:.0f} s; figures in the JSON summary")


if __name__ == "__main__":
    sys.exit(main())
