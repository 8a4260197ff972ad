"""Synthetic gradient-test results for ``prereg dry-run``: a ``batches.parquet`` with the results
contract's columns, from made-up vectors, so that a plan's gradient-test section can be seen
before any measurement. Every result written here says ``"synthetic": true`` in ``meta.json`` and
the report marks it; nothing here measures a policy.

Per batch b, in a small space of ``DIM`` dimensions: a true gradient g, the reference
ĥ_b = g + noise, and each configuration's update u_b = a_c·ĥ_b-direction plus noise, a_c and the
noise scale drawn per configuration from the test's seed (Monte-Carlo configurations: noise
variance 1 + 2/k, so the a + b/k fit has something to fit). V is spanned by ``subspace`` random
vectors; a configuration whose credit is constant within a completion (outcome, RLOO, the PRM as
a reward or baseline) updates inside V, so its alignment is NaN as in the paper's Table 6. Token
counts follow the recipe: prompts × completions × completion_limit/2 rollout tokens, plus, for
a Monte-Carlo configuration, prompts × completions × k · cuts · limit/2 continuation tokens.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyses.gradient import project_out

from .. import __version__
from ..plan import GradientTest, Plan
from ..plan.gradient import CONTINUATION_RULES, RECIPE_DEFAULTS, credit_of, resolved_spec, rollout_of, with_variants

DIM = 64  # dimensions of the made-up parameter space
WHOLE_COMPLETION_RULES = ("outcome", "rloo", "prm_reward", "prm_baseline")  # credit constant within a completion


def _stream(seed: int, *key: str) -> np.random.Generator:
    digest = hashlib.sha256("/".join(key).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def synthetic_batches(plan: Plan, t: GradientTest, *, seed: int = 0) -> pd.DataFrame:
    """One row per (batch, configuration) with the results contract's columns (module docstring)."""
    spec = resolved_spec(t, plan)
    plan = with_variants(plan, t)
    n_comp = spec["prompts"] * spec["completions"]
    rng = _stream(seed, t.id, "gradient")
    g = rng.normal(size=DIM)
    g *= 2 / np.linalg.norm(g)
    params = {}
    for c in t.configurations:
        credit, roll = credit_of(plan.resolved_config(c)), rollout_of(plan.resolved_config(c))
        r = _stream(seed, t.id, c)
        mc = credit["rule"] in CONTINUATION_RULES
        k = int(credit.get("mc_k", RECIPE_DEFAULTS["credit.mc_k"])) if mc else 0
        cuts = len(credit.get("mc_cuts") or []) or int(credit.get("mc_segments", RECIPE_DEFAULTS["credit.mc_segments"])) - 1
        limit = int(credit.get("mc_continuation_limit") or roll["completion_limit"])
        params[c] = (credit["rule"], k, r.uniform(0.3, 1.2), np.sqrt(1 + 2 / k) if mc else r.uniform(0.8, 1.6),
                     n_comp * roll["completion_limit"] // 2, n_comp * k * cuts * limit // 2 if mc else 0)
    rows = []
    for b in range(t.batches):
        h = g + rng.normal(size=DIM) * 0.6
        Q = rng.normal(size=(min(t.subspace, DIM // 2), DIM))
        h_perp = project_out(h, Q)
        for c, (rule, k, a, sd, roll_tok, cont_tok) in params.items():
            u = a * g + rng.normal(size=DIM) * sd / np.sqrt(DIM) * 2
            d = u - project_out(u, Q) if rule in WHOLE_COMPLETION_RULES else u  # inside V: no component outside
            d_perp = project_out(d, Q)
            pdd, phh, pdh = float(d_perp @ d_perp), float(h_perp @ h_perp), float(d_perp @ h_perp)
            if pdd <= 1e-12 * max(float(d @ d), 1e-300):
                pdd, pdh = 0.0, 0.0
            jitter = rng.uniform(0.9, 1.1)
            rt, ct = int(roll_tok * jitter), int(cont_tok * jitter)
            rows.append({"test": t.id, "batch": b, "configuration": c, "credit_rule": rule, "mc_k": k,
                         "dot_uh": float(u @ h), "uu": float(u @ u), "hh": float(h @ h),
                         "perp_dh": pdh, "perp_dd": pdd, "perp_hh": phh,
                         "alignment": pdh / np.sqrt(pdd * phh) if pdd > 0 and phh > 0 else np.nan,
                         "v_rank": int(np.linalg.matrix_rank(Q)), "projection_residual": 0.0,
                         "rollout_tokens": rt, "continuation_tokens": ct, "tokens": rt + ct, "seconds": 0.0})
    return pd.DataFrame(rows)


def write_synthetic_result(folder: Path, plan: Plan, t: GradientTest, plan_hash: str, *, seed: int = 0) -> Path:
    """Write ``batches.parquet`` and ``meta.json`` (``"synthetic": true``) of test ``t`` into ``folder``."""
    started = datetime.now(timezone.utc)
    folder.mkdir(parents=True, exist_ok=True)
    synthetic_batches(plan, t, seed=seed).to_parquet(folder / "batches.parquet", index=False)
    ended = datetime.now(timezone.utc)
    meta: dict[str, Any] = {
        "test": t.id, "plan_hash": plan_hash, "spec": resolved_spec(t, plan), "policy": t.policy, "model_sha256": None,
        "parameters": DIM, "device": "synthetic (prereg dry-run)", "torch_version": None, "tool_version": __version__,
        "started_at": started.isoformat().replace("+00:00", "Z"), "ended_at": ended.isoformat().replace("+00:00", "Z"),
        "seconds": (ended - started).total_seconds(),
        "memory": {"held_vectors": 0, "bytes_per_vector": 4 * DIM, "peak_held_bytes": 0, "peak_rss_bytes": 0},
        "status": "complete", "synthetic": True}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return folder


__all__ = ["synthetic_batches", "write_synthetic_result"]
