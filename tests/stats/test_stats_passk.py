"""pass_at_k against exact rational arithmetic and the HumanEval product formula."""

import math
from fractions import Fraction

import numpy as np
import pytest

from prereg_kit.stats import pass_at_k


def exact(n, c, k):
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def humaneval(n, c, k):
    # Chen et al. (2021), numerically stable product form.
    if n - c < k:
        return 1.0
    return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))


def test_matches_exact_and_humaneval_for_all_small_cases():
    for n in range(1, 17):
        for c in range(n + 1):
            for k in range(1, n + 1):
                got = pass_at_k(n, c, k)
                assert got == pytest.approx(exact(n, c, k), rel=1e-12, abs=1e-15)
                assert got == pytest.approx(humaneval(n, c, k), rel=1e-12, abs=1e-15)


def test_vectorized_broadcasting_and_paper_n8():
    c = np.arange(9)
    out = pass_at_k(8, c, 1)
    np.testing.assert_allclose(out, c / 8, rtol=1e-14)  # pass@1 is the share correct
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0  # pass@8: any sample correct
    grid = pass_at_k(8, c[:, None], np.array([1, 2, 4, 8])[None, :])
    assert grid.shape == (9, 4)
    assert np.all(np.diff(grid, axis=1) >= 0) and np.all(np.diff(grid, axis=0) >= 0)
    assert isinstance(pass_at_k(8, 3, 2), float)


def test_large_n_is_finite_and_accurate():
    for n, c, k in ((5000, 3, 1000), (2000, 1000, 900), (3000, 0, 1500)):
        assert pass_at_k(n, c, k) == pytest.approx(exact(n, c, k), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("args", [(8, 9, 1), (8, -1, 1), (8, 2, 0), (8, 2, 9), (8, 2.5, 1)])
def test_errors(args):
    with pytest.raises(ValueError):
        pass_at_k(*args)
