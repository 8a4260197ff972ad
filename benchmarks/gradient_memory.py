"""Benchmark: memory and time of a gradient test (trainer/gradient_test.py) as functions of the
model's parameter count P, the subspace size and the number of configurations R.

Tiny models (``model.tiny``) of three sizes on the synthetic task, 4 prompts × 4 completions of
at most 24 tokens per batch; configurations outcome, mc_k1, mc_k2 (R = 1 uses outcome alone).
Prints, per case, P, the held P-vectors and their bytes (exact, from ``meta.json``), the
process's peak RSS and the seconds per scored batch (the mean over ``--batches``).

    python3 benchmarks/gradient_memory.py [--batches 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
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


def plan(size: str, configurations: list[str], subspace: int, batches: int) -> str:
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
engine = {{ threads = 4 }}

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


def case(root: Path, cache: Path, size: str, configurations: list[str], subspace: int, batches: int) -> dict:
    from trainer.gradient_test import run_gradient_test

    d = root / f"{size}-r{len(configurations)}-s{subspace}"
    d.mkdir()
    (d / "plan.toml").write_text(plan(size, configurations, subspace, batches))
    (d / ".cache").symlink_to(cache, target_is_directory=True)
    secs: list[float] = []

    def log(msg: str) -> None:
        m = re.search(r": batch \d+/\d+ \(([\d.]+) s\)", msg)
        if m:
            secs.append(float(m.group(1)))

    folder = run_gradient_test(d, "G1", log=log)
    meta = json.loads((folder / "meta.json").read_text())
    mem = meta["memory"]
    return {"model": size, "P": meta["parameters"], "R": len(configurations), "subspace": subspace,
            "held": mem["held_vectors"], "held_MB": mem["peak_held_bytes"] / 2**20,
            "rss_MB": mem["peak_rss_bytes"] / 2**20, "s_per_batch": sum(secs[1:]) / max(1, len(secs) - 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=3, help="scored batches per case (the first is not timed)")
    ap.add_argument("--keep", type=Path, help="build the studies here and keep them")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="gradbench-"))
    root.mkdir(parents=True, exist_ok=True)
    cache = root / "cache"
    cache.mkdir(exist_ok=True)
    three = ["outcome", "mc_k1", "mc_k2"]
    # small to large: peak RSS is the process's running maximum
    cases = [("S", three, 8), ("M", ["outcome"], 8), ("M", three, 8), ("M", three, 16), ("L", three, 8)]
    t0 = time.perf_counter()
    rows = [case(root, cache, s, c, sub, args.batches) for s, c, sub in cases]
    print("| model | P | R | subspace | held vectors | held MB | peak RSS MB | s / batch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['P']:,} | {r['R']} | {r['subspace']} | {r['held']} | {r['held_MB']:.1f} | "
              f"{r['rss_MB']:.0f} | {r['s_per_batch']:.2f} |")
    print(f"total {time.perf_counter() - t0:.0f} s")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
