"""The analysis starts without ``scipy.stats`` (over a second of import): the statistics compute
the normal, t, chi-square and noncentral-t functions through ``scipy.special`` as ``scipy.stats``
itself does (``prereg_kit.stats.tdist``), and import ``scipy.stats`` / ``scipy.optimize`` /
``scipy.integrate`` only inside the functions that need them. The values stay those of
``scipy.stats`` to 1e-12, and the public statistics those of the code before the change.

``tests/data/stats_reference.json`` holds the outputs of :func:`_cases` computed by the code
before the change (the main checkout at commit 4c37890, which called ``scipy.stats``):
``PYTHONPATH=/path/to/that/checkout:tests python tests/stats/test_stats_imports.py --write``. The
``wilcoxon_paired/*`` entries were rewritten when it took R's rules (one-sided intervals for
one-sided alternatives, R's inversion with ties, the ``ci_method`` field); their p-values and
two-sided untied estimates and intervals are those of that commit.
The two one-sided entries (``tost_*``, ``minimal_effect``) gained ``kind`` and ``holds`` (the Welch one
also ``n``, ``n_dropped``, ``sd``, ``t_lower``, ``t_upper``, ``zero_sd``) when ``Tost``, ``MinimalEffect``
and ``WelchTost`` became the one ``TwoOneSided``; every value they held before is the same to the bit.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any, Callable

import numpy as np
import pytest
from paths import ROOT

REFERENCE = ROOT / "tests" / "data" / "stats_reference.json"
TOL = 1e-12

# Prints which of the slow scipy sub-packages are in sys.modules after the analysis's imports (in a
# fresh process), then again after each of ``{then}`` is imported in turn: one process answers both
# the check and the checks that the probe can fail.
PROBE = """\
import json, sys
slow = ("scipy.stats", "scipy.optimize", "scipy.integrate")
def report():
    print("LOADED " + json.dumps(sorted(m for m in slow if m in sys.modules)))
import prereg_kit.analysis.analyze, prereg_kit.report, prereg_kit.stats
report()
for m in {then!r}:
    __import__(m)
    report()
"""
THEN = ("scipy.optimize", "scipy.stats")


@pytest.fixture(scope="module")
def loaded() -> list[list[str]]:
    """What the probe reports: after the analysis's imports, then after each of ``THEN``."""
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-c", PROBE.format(then=THEN)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)})
    lines = [json.loads(ln[len("LOADED "):]) for ln in res.stdout.splitlines() if ln.startswith("LOADED ")]
    assert res.returncode == 0 and len(lines) == 1 + len(THEN), res.stdout + res.stderr
    return lines


def test_the_analysis_imports_no_scipy_stats_optimize_or_integrate(loaded):
    assert loaded[0] == []


def test_the_probe_sees_scipy_stats_when_something_imports_it(loaded):
    assert loaded[1] == ["scipy.optimize"]  # the analysis loaded none of the three: this one alone
    assert "scipy.stats" in loaded[2]


# --- the distribution functions against scipy.stats ---------------------------------------------

XS = [*np.linspace(-40, 40, 81).tolist(), -1e-9, 1e-9, 0.0, -1.96, 2.0639, -300.0, 1e3, math.inf, -math.inf, math.nan]
QS = [0.0, 1e-300, 1e-200, 1e-100, 1e-30, 1e-14, 1e-12, 1e-6, 0.001, 0.0125, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8,
      0.9, 0.95, 0.975, 0.999, 1 - 1e-9, 1 - 1e-15, 1 - 1e-16, 1.0, -0.1, 1.1, math.nan]
DFS = [1, 2, 3, 5, 7.5, 23, 100, 1e3, 1e4, 1e6]
CHI2_XS = [0.0, 1e-300, 1e-12, 1e-3, 0.5, 1, 2, 5, 10, 23, 50, 100, 1e3, 1e4, 1e6, -1.0, math.inf, math.nan]
NCS = [-10.0, -1.5, 0.0, 0.3, 2.5, 10.0, 38.0]


def _same(ours: Any, ref: Any) -> bool:
    """Equal to 1e-12, relative and absolute (NaN equals NaN, infinities exactly)."""
    a, b = float(ours), float(ref)
    if math.isnan(b) or math.isinf(b) or b == 0.0:
        return (math.isnan(a) and math.isnan(b)) or a == b
    return abs(a - b) <= TOL * min(1.0, abs(b))


def _check_grid(ours: Callable, ref: Callable, grid: list[tuple]) -> None:
    bad = [(args, ours(*args), float(ref(*args))) for args in grid if not _same(ours(*args), ref(*args))]
    assert not bad, bad[:5]


def test_normal_functions_equal_scipy_stats():
    from scipy import stats as sps

    from prereg_kit.stats.tdist import norm_cdf, norm_isf, norm_ppf, norm_sf, norm_sf_array

    _check_grid(norm_cdf, sps.norm.cdf, [(x,) for x in XS])
    _check_grid(norm_sf, sps.norm.sf, [(x,) for x in XS])
    _check_grid(norm_ppf, sps.norm.ppf, [(q,) for q in QS])
    _check_grid(norm_isf, sps.norm.isf, [(q,) for q in QS])
    x = np.array(XS)
    np.testing.assert_array_equal(norm_sf_array(x), sps.norm.sf(x))
    assert type(norm_sf_array(np.asarray(1.5))) is type(sps.norm.sf(np.asarray(1.5)))


def test_t_functions_equal_scipy_stats():
    from scipy import stats as sps

    from prereg_kit.stats.tdist import t_cdf, t_cdf_array, t_isf, t_ppf, t_sf, t_sf_array

    _check_grid(t_cdf, sps.t.cdf, [(x, df) for x in XS for df in DFS])
    _check_grid(t_sf, sps.t.sf, [(x, df) for x in XS for df in DFS])
    _check_grid(t_ppf, sps.t.ppf, [(q, df) for q in QS for df in DFS])
    _check_grid(t_isf, sps.t.isf, [(q, df) for q in QS for df in DFS])
    x = np.array(XS)
    for df in (1, 23, 1e6):
        np.testing.assert_array_equal(t_sf_array(x, df), sps.t.sf(x, df))
        np.testing.assert_array_equal(t_cdf_array(x, df), sps.t.cdf(x, df))


def test_chi_square_functions_equal_scipy_stats():
    from scipy import stats as sps

    from prereg_kit.stats.tdist import chi2_isf, chi2_pdf, chi2_ppf

    with np.errstate(invalid="ignore"):  # both give NaN at x = inf (inf − inf in the log density)
        _check_grid(chi2_pdf, sps.chi2.pdf, [(x, df) for x in CHI2_XS for df in DFS])
    _check_grid(chi2_ppf, sps.chi2.ppf, [(q, df) for q in QS for df in DFS])
    _check_grid(chi2_isf, sps.chi2.isf, [(q, df) for q in QS for df in DFS])


def test_noncentral_t_functions_equal_scipy_stats():
    from scipy import stats as sps

    from prereg_kit.stats.tdist import nct_cdf, nct_sf

    xs = [x for x in XS if not -40 < x < 40 or x == int(x) and x % 4 == 0]
    grid = [(x, df, nc) for x in xs for df in (1, 3, 23, 100, 1e4) for nc in NCS]
    with np.errstate(all="ignore"):
        _check_grid(nct_cdf, sps.nct.cdf, grid)
        _check_grid(nct_sf, sps.nct.sf, grid)
    assert math.isnan(nct_cdf(1.0, 5, math.nan)) and math.isnan(sps.nct.cdf(1.0, 5, math.nan))


def test_the_comparison_sees_a_change_beyond_1e_12():
    assert _same(0.05, 0.05) and _same(math.nan, math.nan) and _same(math.inf, math.inf) and _same(1e-300, 1e-300)
    assert not _same(0.05 * (1 + 1e-11), 0.05)
    assert not _same(1e-300 * (1 + 1e-11), 1e-300)
    assert not _same(1e-13, 0.0) and not _same(0.0, math.nan) and not _same(-math.inf, math.inf)
    with pytest.raises(AssertionError):
        _check_grid(lambda x: x + 1e-9, lambda x: x, [(0.5,)])
    with pytest.raises(AssertionError):
        _compare({"a": [1.0, 2.0]}, {"a": [1.0, 2.0 + 1e-10]})
    with pytest.raises(AssertionError):
        _compare({"a": "x"}, {"a": "y"})


# --- the public statistics against the code before the change -----------------------------------


def _data(seed: int, n: int, mean: float = 0.01, sd: float = 0.02, decimals: int | None = None) -> list[float]:
    x = np.random.default_rng(seed).normal(mean, sd, n)
    return (np.round(x, decimals) if decimals is not None else x).tolist()


def _cases() -> dict[str, Callable[[], Any]]:
    """Named calls of the public statistics whose outputs the reference file stores."""
    from prereg_kit import stats as st
    from prereg_kit.stats import group_sequential as gs
    from prereg_kit.stats.sequential import spending_function

    d24, d6, d60 = _data(1, 24), _data(2, 6, 0.004, 0.01), _data(3, 60, 0.003, 0.02)
    arm_t, arm_c = _data(4, 24, 0.61, 0.03), _data(5, 24, 0.60, 0.03)
    ties = [*_data(6, 30, 0.002, 0.01, decimals=2), 0.0, 0.0]
    info = (6, 12, 24)
    c: dict[str, Callable[[], Any]] = {}
    for alt in ("two-sided", "greater", "less"):
        c[f"paired_t/{alt}"] = lambda alt=alt: st.paired_t(d24, alternative=alt)
        c[f"paired_t/6/{alt}"] = lambda alt=alt: st.paired_t(d6, confidence=0.9, alternative=alt)
        c[f"wilcoxon_paired/exact/{alt}"] = lambda alt=alt: st.wilcoxon_paired(d24, alternative=alt)
        c[f"wilcoxon_paired/normal/{alt}"] = lambda alt=alt: st.wilcoxon_paired(d60, alternative=alt)
        c[f"wilcoxon_paired/ties/{alt}"] = lambda alt=alt: st.wilcoxon_paired(ties, 0.9, alternative=alt)
        c[f"welch_t/{alt}"] = lambda alt=alt: st.welch_t(arm_t, arm_c, alternative=alt)
        c[f"power_paired_t/{alt}"] = lambda alt=alt: st.power_paired_t(24, 0.01, 0.02, alternative=alt)
        c[f"power_paired_t/small/{alt}"] = lambda alt=alt: st.power_paired_t(3, -0.004, 0.03, alpha=0.1, alternative=alt)
        sign = -1 if alt == "less" else 1
        c[f"solve_power/n/{alt}"] = lambda alt=alt, s=sign: st.solve_power_paired(effect=s * 0.01, sd=0.02, power=0.8, alternative=alt)
        c[f"solve_power/effect/{alt}"] = lambda alt=alt: st.solve_power_paired(n=24, sd=0.02, power=0.9, alternative=alt)
        c[f"solve_power/alpha/{alt}"] = lambda alt=alt, s=sign: st.solve_power_paired(n=20, effect=s * 0.01, sd=0.02, alpha=None, power=0.8, alternative=alt)
        c[f"solve_power/power/{alt}"] = lambda alt=alt, s=sign: st.solve_power_paired(n=12, effect=s * 0.01, sd=0.02, power=None, alternative=alt)
    c["paired_t/arms"] = lambda: st.paired_t(arm_t, arm_c)
    c["paired_t_from_stats"] = lambda: st.paired_t_from_stats(24, 0.011, 0.019, confidence=0.9)
    c["tost_paired"] = lambda: st.tost_paired(d24, margin=0.02)
    c["tost_paired/asymmetric"] = lambda: st.tost_paired(arm_t, arm_c, margin=(-0.01, 0.03), alpha=0.1)
    c["tost_from_stats"] = lambda: st.tost_from_stats(24, 0.003, 0.02, margin=0.02)
    c["noninferiority"] = lambda: st.noninferiority_paired(d24, margin=0.01)
    c["noninferiority_from_stats"] = lambda: st.noninferiority_from_stats(6, -0.002, 0.01, margin=0.01)
    c["minimal_effect"] = lambda: st.minimal_effect_paired(d24, margin=0.002)
    c["tost_welch"] = lambda: st.tost_welch(arm_t, arm_c, margin=0.02)
    c["noninferiority_welch"] = lambda: st.noninferiority_welch(arm_t, arm_c, margin=0.01)
    c["wilcoxon_tost"] = lambda: st.wilcoxon_tost(d24, margin=(-0.02, 0.03))
    c["wilcoxon_tost/normal"] = lambda: st.wilcoxon_tost(d60, margin=0.01)
    c["wilcoxon_paired/large_ci"] = lambda: st.wilcoxon_paired(_data(7, 80), 0.99)
    c["power_noninferiority"] = lambda: st.power_noninferiority_paired(24, 0.0, 0.02, margin=0.01)
    c["power_tost_paired"] = lambda: st.power_tost_paired(24, 0.002, 0.02, margin=0.02)
    c["power_tost_paired/asymmetric"] = lambda: st.power_tost_paired(10, -0.005, 0.03, margin=(-0.04, 0.02), alpha=0.1)
    c["power_tost_paired/large_n"] = lambda: st.power_tost_paired(400, 0.0, 0.05, margin=0.01)
    c["seeds_needed/superiority"] = lambda: st.seeds_needed(0.01, 0.02)
    c["seeds_needed/equivalence"] = lambda: st.seeds_needed(0.0, 0.02, kind="equivalence", margin=0.015)
    c["seeds_needed/noninferiority"] = lambda: st.seeds_needed(0.0, 0.02, kind="non-inferiority", margin=0.01, power=0.9)
    c["effect_size_paired"] = lambda: st.effect_size_paired(d24)
    c["effect_size_paired/6"] = lambda: st.effect_size_paired(d6, 0.9)
    c["effect_size_paired/large_t"] = lambda: st.effect_size_paired(_data(8, 12, 0.05, 0.002))
    c["effect_size_from_stats"] = lambda: st.effect_size_from_stats(24, 0.011, 0.019)
    c["effect_size_paired_arms"] = lambda: st.effect_size_paired_arms(arm_t, arm_c)
    c["tost_summary"] = lambda: st.tost_summary(24, 0.003, 0.02, margin=0.02)
    c["from_summary"] = lambda: st.from_summary("0.012", "0.004", "0.020", 24, margin=0.02, family_size=3,
                                                reported={"p": 0.005, "tost_p": 0.02, "holm_p": 0.015})
    c["from_summary/noninferiority"] = lambda: st.from_summary(-0.003, -0.011, 0.005, 10, confidence=0.9,
                                                               margin=(-0.02, 0.01), reported={"noninferiority_p": 0.001})
    for spending, rho in (("obrien-fleming", 2.0), ("pocock", 2.0), ("power", 3.0)):
        c[f"sequential_boundaries/{spending}"] = lambda s=spending, r=rho: st.sequential_boundaries(3, 0.05, s, info, rho=r)
        c[f"spending_function/{spending}"] = lambda s=spending, r=rho: spending_function(np.array([0.0, 0.25, 0.5, 1.0]), 0.05, s, r)
        c[f"look_threshold/{spending}"] = lambda s=spending, r=rho: [gs.look_threshold(0.05, info, k, s, r) for k in (1, 2, 3)]
        c[f"repeated_p/{spending}"] = lambda s=spending, r=rho: [gs.repeated_p(p, info, k, spending=s, rho=r)
                                                                 for p in (1e-6, 0.001, 0.02, 0.3) for k in (1, 2, 3)]
        c[f"final_boundary/{spending}"] = lambda s=spending, r=rho: gs.final_boundary(0.05, info, s, r)
    c["sequential_boundaries/5"] = lambda: st.sequential_boundaries(5, 0.025)
    c["classical/obrien-fleming"] = lambda: st.classical_boundaries(4, 0.05, "obrien-fleming")
    c["classical/pocock"] = lambda: st.classical_boundaries(3, 0.05, "pocock", info)
    c["crossing_probabilities"] = lambda: st.crossing_probabilities([3.47, 2.45, 2.0], info, drift=2.5)
    c["z_of_p"] = lambda: [gs.z_of_p(p) for p in (1e-300, 1e-10, 0.001, 0.05, 0.5, 1.0)]
    c["conditional_power"] = lambda: [gs.conditional_power(z, info, k, 2.0) for z in (-1.0, 0.5, 2.2) for k in (1, 2, 3)]
    c["sequential_holm"] = lambda: gs.sequential_holm([0.001, 0.04, math.nan, 0.01], 0.05, info, 2)
    return c


def _plain(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _compare(ours: Any, ref: Any, where: str = "") -> None:
    if isinstance(ref, dict):
        assert isinstance(ours, dict) and sorted(ours) == sorted(ref), where
        for k in ref:
            _compare(ours[k], ref[k], f"{where}.{k}")
    elif isinstance(ref, list):
        assert isinstance(ours, list) and len(ours) == len(ref), where
        for i, (a, b) in enumerate(zip(ours, ref)):
            _compare(a, b, f"{where}[{i}]")
    elif isinstance(ref, float) and not isinstance(ours, bool) and isinstance(ours, (int, float)):
        assert _same(ours, ref), (where, ours, ref)
    else:
        assert ours == ref, (where, ours, ref)


REFERENCE_CASES = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {}


def test_the_reference_covers_every_case():
    assert sorted(REFERENCE_CASES) == sorted(_cases())


@pytest.mark.parametrize("name", sorted(REFERENCE_CASES))
def test_the_statistics_are_unchanged(name: str):
    _compare(_plain(_cases()[name]()), REFERENCE_CASES[name], name)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    out = {name: _plain(f()) for name, f in sorted(_cases().items())}
    REFERENCE.parent.mkdir(exist_ok=True)
    REFERENCE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{len(out)} cases -> {REFERENCE}")
