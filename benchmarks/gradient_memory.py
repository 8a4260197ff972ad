"""Benchmark: memory and time of a gradient test (trainer/gradient_test.py) as functions of the
model's parameter count P, the subspace size and the number of configurations R.

Tiny models (``model.tiny``) of three sizes on the synthetic task, 4 prompts × 4 completions of
at most 24 tokens per batch; configurations outcome, mc_k1, mc_k2 (R = 1 uses outcome alone).
Prints, per case, P, the held P-vectors and their bytes (exact, from ``meta.json``), the
process's peak RSS and the seconds per scored batch (the mean over ``--batches``, the first left
out), then ratio lines measured in this one run (:func:`ratio_lines`): held memory and time per
batch of R = 3 against R = 1, of subspace 16 against 8, and of each model against the next smaller
one (beside the ratio of their P). Held bytes are counted exactly and do not depend on the load;
the times are taken one case after another and move with it.

    python3 benchmarks/gradient_memory.py [--batches 3] [--threads 4] [--keep DIR] [--quick]

``--quick`` (make bench): 2 batches per case (one timed) and one torch thread (two or more on 2
shared cores make every OpenMP barrier wait for a thread that is not running).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SIZES = {  # hidden, layers, heads, intermediate
    "S": (64, 2, 4, 128),
    "M": (96, 2, 4, 256),
    "L": (256, 2, 4, 1024),
}
CONFIGS = """\
[configurations.outcome]
[configurations.mc_k1]
overrides = { credit = { rule = "monte_carlo", mc_k = 1, mc_segments = 3 } }
[configurations.mc_k2]
overrides = { credit = { rule = "monte_carlo", mc_k = 2, mc_segments = 3 } }
"""


def plan(size: str, configurations: list[str], subspace: int, batches: int, threads: int = 4) -> str:
    h, layers, heads, inter = SIZES[size]
    names = ", ".join(f'"{c}"' for c in configurations)
    return f"""\
[study]
id = "gradbench"
title = "gradient-test cost"
question = "How do memory and time grow?"
comparator = "outcome"
seeds = [0]

[recipe]
task = {{ name = "synthetic", levels = [1], train_problems = 200 }}
model = {{ name = "tiny", tiny = {{ hidden_size = {h}, layers = {layers}, heads = {heads}, intermediate_size = {inter} }}, warm_start = {{ steps = 20, batch_size = 16 }} }}
rollout = {{ prompts_per_iteration = 4, group_size = 4, completion_limit = 24 }}
engine = {{ threads = {threads} }}

{CONFIGS}
[budget]
tokens = 1000
eval_every = "B/2"

[evaluation]
samples = 1
sets = [{{ name = "heldout", source = "synthetic:eval", n_problems = 4 }}]

[[contrasts]]
id = "C1"
treatment = "mc_k2"
control = "outcome"
tier = "primary"

[[families]]
name = "primary"
members = ["C1"]

[[gradient_tests]]
id = "G1"
configurations = [{names}]
batches = {batches}
subspace = {subspace}
reference = {{ completions = 4, cuts = 2, continuations = 2, continuation_limit = 8 }}
"""


def case(root: Path, cache: Path, size: str, configurations: list[str], subspace: int, batches: int,
         threads: int = 4) -> dict:
    from trainer.gradient_test import run_gradient_test

    d = root / f"{size}-r{len(configurations)}-s{subspace}"
    d.mkdir()
    (d / "plan.toml").write_text(plan(size, configurations, subspace, batches, threads))
    (d / ".cache").symlink_to(cache, target_is_directory=True)
    ends: list[float] = []  # when each scored batch ended (its log line rounds to 0.1 s: too coarse for a ratio)

    def log(msg: str) -> None:
        if re.search(r": batch \d+/\d+ \(", msg):
            ends.append(time.perf_counter())

    folder = run_gradient_test(d, "G1", log=log)
    meta = json.loads((folder / "meta.json").read_text())
    mem = meta["memory"]
    return {"model": size, "P": meta["parameters"], "R": len(configurations), "subspace": subspace,
            "held": mem["held_vectors"], "held_MB": mem["peak_held_bytes"] / 2**20,
            "rss_MB": mem["peak_rss_bytes"] / 2**20,
            "s_per_batch": (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else float("nan")}


def ratio_lines(rows: list[dict]) -> list[str]:
    """Held memory and time per batch of one case against another, both measured in this run."""
    by = {(r["model"], r["R"], r["subspace"]): r for r in rows}

    def line(what: str, a: tuple, b: tuple, extra: str = "") -> str:
        x, y = by[a], by[b]
        return (f"{what}: held memory {x['held_MB'] / y['held_MB']:.2f}×, time per batch "
                f"{x['s_per_batch'] / y['s_per_batch']:.2f}×{extra}")

    out = [line("R = 3 vs R = 1 (model M, subspace 8)", ("M", 3, 8), ("M", 1, 8)),
           line("subspace 16 vs 8 (model M, R = 3)", ("M", 3, 16), ("M", 3, 8))]
    sizes = [m for m in SIZES if (m, 3, 8) in by]
    for small, large in itertools.pairwise(sizes):
        p = by[large, 3, 8]["P"] / by[small, 3, 8]["P"]
        out.append(line(f"model {large} vs {small} (R = 3, subspace 8)", (large, 3, 8), (small, 3, 8), f" (P {p:.2f}×)"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=3, help="scored batches per case (at least 2: the first is not timed)")
    ap.add_argument("--threads", type=int, default=4, help="torch threads of the gradient test")
    ap.add_argument("--keep", type=Path, help="build the studies here and keep them")
    ap.add_argument("--quick", action="store_true", help="2 batches per case, 1 thread (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.batches, args.threads = 2, 1
    if args.batches < 2:
        ap.error("--batches: at least 2 (the first scored batch is not timed)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="gradbench-"))
    root.mkdir(parents=True, exist_ok=True)
    cache = root / "cache"
    cache.mkdir(exist_ok=True)
    three = ["outcome", "mc_k1", "mc_k2"]
    # small to large: peak RSS is the process's running maximum
    cases = [("S", three, 8), ("M", ["outcome"], 8), ("M", three, 8), ("M", three, 16), ("L", three, 8)]
    t0 = time.perf_counter()
    rows = [case(root, cache, s, c, sub, args.batches, args.threads) for s, c, sub in cases]
    print("| model | P | R | subspace | held vectors | held MB | peak RSS MB | s / batch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['P']:,} | {r['R']} | {r['subspace']} | {r['held']} | {r['held_MB']:.1f} | "
              f"{r['rss_MB']:.0f} | {r['s_per_batch']:.3f} |")
    print(f"total {time.perf_counter() - t0:.0f} s")
    for ln in ratio_lines(rows):
        print(ln)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
