"""The fixed public API of prereg_kit.stats: names, keywords, frozen results with to_dict() and to_frame()."""

import dataclasses
import inspect
import json

import numpy as np
import pandas as pd
import pytest

import prereg_kit.stats as st

FIXED = {
    "paired_t": ["treatment", "control", "confidence", "alternative"],
    "holm": ["pvalues"],
    "tost_paired": ["treatment", "control", "margin", "alpha"],
    "noninferiority": ["treatment", "control", "margin", "alpha"],
    "seed_bootstrap": ["differences", "n_resamples", "confidence", "seed", "exhaustive", "margin"],
    "crossed_bootstrap": ["treatment", "control", "n_resamples", "confidence", "seed"],
    "pass_at_k": ["n", "c", "k"],
    "from_summary": ["mean", "ci_low", "ci_high", "n", "confidence", "margin", "family_size"],
}


@pytest.mark.parametrize("name, params", FIXED.items())
def test_fixed_signatures(name, params):
    sig = inspect.signature(getattr(st, name))
    assert list(sig.parameters)[: len(params)] == params


def test_results_frozen_slotted_and_serializable():
    d = np.array([0.01, 0.004, 0.012, -0.002, 0.008])
    results = [
        st.paired_t(d), st.tost_paired(d, margin=0.02), st.noninferiority_paired(d, margin=0.02),
        st.seed_bootstrap(d, margin=0.02), st.crossed_bootstrap(np.outer(d, np.ones(4)), n_resamples=100),
        st.seeds_needed(0.008, 0.012), st.from_summary("+0.007", "+0.002", "+0.012", 24, reported={"p": ".008"}),
        st.verdict("superiority", p=0.01, estimate=0.01),
    ]
    for r in results:
        assert dataclasses.is_dataclass(r) and not hasattr(r, "__dict__")
        first = dataclasses.fields(r)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(r, first, 3)
        json.dumps(r.to_dict())  # plain Python values only


def test_paired_t_fields():
    r = st.paired_t([0.01, 0.02, 0.0])
    for f in ("n", "mean", "sd", "se", "t", "df", "p", "ci_low", "ci_high", "dz"):
        assert hasattr(r, f)
    t = st.tost_paired([0.01, 0.02, 0.0], margin=0.02)
    for f in ("p_lower", "p_upper", "p", "ci_low", "ci_high", "equivalent"):
        assert hasattr(t, f)
    ni = st.noninferiority_paired([0.01, 0.02, 0.0], margin=0.02)
    for f in ("lower", "p", "holds"):
        assert hasattr(ni, f)


def test_all_exports_exist():
    for name in st.__all__:
        assert hasattr(st, name)


def _results() -> dict[str, object]:
    """One instance of every public result class of prereg_kit.stats."""
    d = np.array([0.01, 0.004, 0.012, -0.002, 0.008])
    c = np.array([0.0, 0.001, 0.003, 0.002, -0.001, 0.004])
    summary = st.from_summary("+0.007", "+0.002", "+0.012", 24, reported={"p": ".008"})
    return {"PairedT": st.paired_t(d), "TwoOneSided": st.tost_paired(d, margin=0.02),
            "NonInferiority": st.noninferiority_paired(d, margin=0.02), "SeedBootstrap": st.seed_bootstrap(d, margin=0.02),
            "CrossedBootstrap": st.crossed_bootstrap(np.outer(d, np.ones(4)), n_resamples=100),
            "SeedsNeeded": st.seeds_needed(0.008, 0.012), "SummaryCheck": summary, "ReportedCheck": summary.checks[0],
            "Verdict": st.verdict("superiority", p=0.01, estimate=0.01), "WelchT": st.welch_t(d, c),
            "WelchNonInferiority": st.noninferiority_welch(d, c, margin=0.02),
            "EffectSizePaired": st.effect_size_paired(d), "EffectSizeArms": st.effect_size_paired_arms(d + 0.5, np.full(5, 0.5) + c[:5]),
            "PowerSolution": st.solve_power_paired(effect=0.01, sd=0.01, power=0.8),
            "SequentialBoundaries": st.sequential_boundaries(2), "SignFlip": st.sign_flip_test(d),
            "SequentialTBoundaries": st.sequential_t_boundaries((2, 4), n_paths=4096),
            "SignFlipInterval": st.sign_flip_ci(d), "TostSummary": st.tost_summary(5, 0.006, 0.005, margin=0.02),
            "DzPCheck": st.p_from_dz("0.23", 32, "0.100", test="greater"),
            "BootstrapSummaryCheck": st.bootstrap_from_summary("-0.105", "-0.144", "-0.061", 6, "-1.83"),
            "BootstrapRecompute": st.bootstrap_from_values(["-0.035", "+0.050", "+0.070"], "+0.028", "-0.035", "+0.070"),
            "WilcoxonPaired": st.wilcoxon_paired(d), "WilcoxonTost": st.wilcoxon_tost(d, margin=(-0.02, 0.02)),
            "Aggregate": st.iqm(np.outer(np.linspace(0.2, 0.8, 6), np.ones(3)) + np.arange(3) * 0.01, n_resamples=50),
            "PerformanceProfile": st.performance_profile(np.outer(np.linspace(0.2, 0.8, 6), np.ones(3)), [0.3, 0.5], n_resamples=50)}


def test_every_result_class_has_a_one_row_frame():
    """Every result class the statistics define (found by walking the package, so a new one
    without an instance here fails) gives a one-row DataFrame of its scalar fields."""
    import importlib
    import pkgutil

    from prereg_kit.stats._checks import Result

    classes = {obj.__name__ for m in pkgutil.iter_modules(st.__path__)
               for obj in vars(importlib.import_module(f"{st.__name__}.{m.name}")).values()
               if isinstance(obj, type) and issubclass(obj, Result) and obj is not Result}
    results = _results()
    assert classes == set(results), classes ^ set(results)
    assert classes <= set(st.__all__), classes - set(st.__all__)
    for name, r in results.items():
        f = r.to_frame()
        assert f.shape[0] == 1, name
        for field in dataclasses.fields(r):
            value = getattr(r, field.name)
            if isinstance(value, (tuple, list, np.ndarray)):
                assert field.name not in f.columns, (name, field.name)  # a sequence is left out of the row
            else:
                got = f.loc[0, field.name]
                assert got == value or (value is None or np.isnan(value)) and pd.isna(got), (name, field.name, got)


def test_to_frame_splits_an_interval_and_leaves_out_sequences():
    from prereg_kit.stats._checks import Result

    @dataclasses.dataclass(frozen=True)
    class Made(Result):
        n: int
        ci: tuple[float, float]
        label: str
        values: tuple[float, float, float]
        flags: tuple[bool, bool]

    f = Made(3, (0.1, 0.2), None, (1.0, 2.0, 3.0), (True, False)).to_frame()
    assert list(f.columns) == ["n", "ci_low", "ci_high", "label"] and f.loc[0, "ci_high"] == 0.2
    assert f["label"].dtype == float and np.isnan(f.loc[0, "label"])  # None reads NaN
    assert "values" not in f.columns and "flags" not in f.columns  # three numbers, or two flags, are no interval
