"""The fixed public API of prereg_kit.stats: names, keywords, frozen results with to_dict()."""

import dataclasses
import inspect
import json

import numpy as np
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
        st.paired_t(d), st.tost_paired(d, margin=0.02), st.noninferiority(d, margin=0.02),
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
    ni = st.noninferiority([0.01, 0.02, 0.0], margin=0.02)
    for f in ("lower", "p", "holds"):
        assert hasattr(ni, f)


def test_all_exports_exist():
    for name in st.__all__:
        assert hasattr(st, name)
