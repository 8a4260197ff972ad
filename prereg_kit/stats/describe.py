"""One-line descriptions in words of a contrast's test result (like TOSTER's ``describe()``)."""

from __future__ import annotations

from typing import Any

from .equivalence import NonInferiority, Tost
from .paired import PairedT


def _num(x: float) -> str:
    return f"{x:+.4f}"


def _p(p: float) -> str:
    return f"p = {p:.3g}" if p >= 0.001 else "p < 0.001"


def describe(result: Any, alpha: float = 0.05) -> str:
    """A one-line sentence stating what a paired-t, TOST or non-inferiority result shows.

    The sentence names the estimate, its interval, the statistic with its df, the p-value and the
    decision at ``alpha`` (for TOST and non-inferiority the result's own α), e.g.
    ``"Mean difference +0.012, 95% CI [+0.002, +0.022], t(9) = 2.71, p = 0.024: different from 0
    at α = 0.05."`` Other result types are refused.
    """
    if isinstance(result, PairedT):
        level = f"{100 * result.confidence:g}%"
        shown = result.p < alpha
        null = {"two-sided": "different from 0", "greater": "greater than 0", "less": "less than 0"}[result.alternative]
        verdict = null if shown else f"not shown {null}"
        return (f"Mean difference {_num(result.mean)}, {level} CI [{_num(result.ci_low)}, {_num(result.ci_high)}], "
                f"t({result.df}) = {result.t:.3g}, {_p(result.p)}: {verdict} at α = {alpha:g}.")
    if isinstance(result, Tost):
        level = f"{100 * (1 - 2 * result.alpha):g}%"
        which = "lower" if result.p_lower >= result.p_upper else "upper"
        t = result.t_lower if which == "lower" else result.t_upper
        verdict = ("equivalent within the bounds" if result.equivalent
                   else "not shown equivalent (the interval reaches a bound)")
        return (f"Mean difference {_num(result.mean)}, {level} CI [{_num(result.ci_low)}, {_num(result.ci_high)}], "
                f"bounds [{_num(result.low)}, {_num(result.high)}]; the {which} test gives t({result.df}) = {t:.3g}, "
                f"{_p(result.p)}: {verdict} at α = {result.alpha:g}.")
    if isinstance(result, NonInferiority):
        level = f"{100 * (1 - 2 * result.alpha):g}%"
        verdict = "non-inferior" if result.holds else "not shown non-inferior"
        return (f"Mean difference {_num(result.mean)}, lower end of the {level} CI {_num(result.lower)} against "
                f"margin {_num(-result.margin)}, t({result.df}) = {result.t:.3g}, {_p(result.p)}: {verdict} "
                f"at α = {result.alpha:g}.")
    raise ValueError(f"describe() takes a PairedT, Tost or NonInferiority result, got {type(result).__name__}")
