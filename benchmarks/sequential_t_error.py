"""Benchmark: the family-wise error of group-sequential looks on a paired t under H0, for the rule
that compares each look's paired-t p with the nominal p of a z boundary (the rule before the t
boundaries) and for the t boundaries the looks now use (``prereg_kit.stats.sequential_t``).

Each design (seeds per look, e.g. 2 and 4) is read on ``--studies`` null studies of standard normal
paired differences drawn directly (not through the sufficient statistics the boundaries are
computed from), seeded per design, the same studies for every rule; for every spending function a
plan may name (O'Brien–Fleming, Pocock, power ρ = 1, 2, 3), with and without the non-binding
futility rule (conditional power under the current trend below 0.1, as ``prereg dry-run`` applies
it). A study errs when any look it takes rejects. Printed per row: both rules' family-wise error,
its Monte-Carlo SE ``√(f(1 − f)/n)``, and each as a multiple of α (the ratio lines ``make bench``
passes on); ``--json`` writes the rows. Full size (docs/statistics.md, "Sequential looks"): 400,000
studies per design; ``--quick`` (make bench): 50,000 studies of the designs at 2, 4 and 3, 6 seeds.

    python3 benchmarks/sequential_t_error.py [--studies 400000] [--seed 2026] [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from scipy.special import ndtr, ndtri, stdtr  # noqa: E402

from prereg_kit.stats import sequential_boundaries, sequential_t_boundaries  # noqa: E402

ALPHA = 0.05
DESIGNS = [(2, 4), (3, 6), (4, 8), (2, 4, 6), (3, 6, 9), (4, 8, 12)]
QUICK_DESIGNS = [(2, 4), (3, 6)]
SPENDINGS = [("obrien-fleming", 2.0), ("pocock", 2.0), ("power", 1.0), ("power", 2.0), ("power", 3.0)]
FUTILITY_BELOW = 0.1


def null_t(units: tuple[int, ...], n_studies: int, seed: int, chunk: int = 50_000) -> np.ndarray:
    """Signed paired t statistics at ``units`` (columns) of ``n_studies`` null studies of N(0, 1)
    differences, from each study's running sums and sums of squares."""
    rng = np.random.default_rng(seed)
    n = np.asarray(units)
    out = np.empty((n_studies, n.size))
    for a in range(0, n_studies, chunk):
        x = rng.standard_normal((min(chunk, n_studies - a), units[-1]))
        mean = np.cumsum(x, axis=1)[:, n - 1] / n
        ss = np.cumsum(x * x, axis=1)[:, n - 1] - n * mean**2
        out[a:a + x.shape[0]] = mean / np.sqrt(ss / (n - 1) / n)
    return out


def family_wise_error(p: np.ndarray, units: tuple[int, ...], nominal_p: np.ndarray, *, futility: bool,
                      z: np.ndarray | None = None) -> float:
    """Share of studies that reject at some look they take: look k rejects when its two-sided
    paired-t p (``p[:, k]``) is at most ``nominal_p[k]``; with ``futility``, an interim look that
    does not reject stops the study when the conditional power under the current trend (``z`` of
    the p, ``Φ⁻¹(1 − p/2)``; the final look's z threshold ``Φ⁻¹(1 − nominal_p[K]/2)``) is below 0.1."""
    n = np.asarray(units)
    frac = n / n[-1]
    c_final = -ndtri(nominal_p[-1] / 2.0)
    going = np.ones(p.shape[0], dtype=bool)
    erred = np.zeros(p.shape[0], dtype=bool)
    for k in range(n.size):
        hit = going & (p[:, k] <= nominal_p[k])
        erred |= hit
        going &= ~hit
        if futility and k + 1 < n.size:
            zk = z[:, k] if z is not None else -ndtri(p[:, k] / 2.0)
            cp = ndtr(-(c_final - zk / math.sqrt(frac[k])) / math.sqrt(1.0 - frac[k]))
            going &= cp >= FUTILITY_BELOW
    return float(erred.mean())


def rows_for(units: tuple[int, ...], n_studies: int, seed: int) -> list[dict]:
    """Every spending function × futility row of one design: the z-nominal rule and the t boundaries."""
    t = null_t(units, n_studies, seed)
    p = 2.0 * stdtr(np.asarray(units) - 1, -np.abs(t))
    z = -ndtri(p / 2.0)
    out = []
    for spending, rho in SPENDINGS:
        z_rule = np.array(sequential_boundaries(len(units), ALPHA, spending, units, rho=rho).nominal_p)
        tb = sequential_t_boundaries(units, ALPHA, spending, rho=rho)
        for futility in (False, True):
            old = family_wise_error(p, units, z_rule, futility=futility, z=z)
            new = family_wise_error(p, units, np.array(tb.nominal_p), futility=futility, z=z)
            out.append({"seeds": list(units), "spending": spending + (f" rho={rho:g}" if spending == "power" else ""),
                        "futility": futility, "studies": n_studies, "seed": seed, "fwer_z_rule": old,
                        "se_z_rule": math.sqrt(old * (1 - old) / n_studies), "fwer_t_boundaries": new,
                        "se_t_boundaries": math.sqrt(new * (1 - new) / n_studies), "boundary_mc_se": tb.mc_se})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--studies", type=int, default=400_000, help="null studies per design")
    ap.add_argument("--seed", type=int, default=2026, help="the first design's seed; design i uses seed + i")
    ap.add_argument("--quick", action="store_true", help="50,000 studies of two designs (make bench)")
    ap.add_argument("--json", type=Path, help="write the rows to this file")
    args = ap.parse_args(argv)
    designs, n_studies = (QUICK_DESIGNS, 50_000) if args.quick else (DESIGNS, args.studies)
    print(f"family-wise error at α = {ALPHA} over {n_studies:,} null studies per design "
          "(z rule: t p vs the z boundary's nominal p; t: the t boundaries)")
    rows = []
    for i, units in enumerate(designs):
        t0 = time.perf_counter()
        got = rows_for(units, n_studies, args.seed + i)
        rows += got
        for r in got:
            fut = "futility" if r["futility"] else "no futility"
            print(f"  seeds {','.join(map(str, units)):<8} {r['spending']:<16} {fut:<12} z rule {r['fwer_z_rule']:.4f} "
                  f"({r['fwer_z_rule'] / ALPHA:.3f}×)  t {r['fwer_t_boundaries']:.4f} ({r['fwer_t_boundaries'] / ALPHA:.3f}×)  "
                  f"MC SE {r['se_t_boundaries']:.5f}")
        print(f"  ({time.perf_counter() - t0:.1f} s)")
    worst = max(rows, key=lambda r: r["fwer_t_boundaries"])
    print(f"largest with the t boundaries: {worst['fwer_t_boundaries']:.4f} (seeds {worst['seeds']}, {worst['spending']}, "
          f"futility {worst['futility']}); largest with the z rule: {max(r['fwer_z_rule'] for r in rows):.4f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
