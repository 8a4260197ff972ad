"""One-line descriptions in words of a contrast's test result (like TOSTER's ``describe()``)."""

from __future__ import annotations

from typing import Any

from .equivalence import NonInferiority, TwoOneSided
from .paired import PairedT
from .signflip import SignFlip
from .wilcoxon import WilcoxonPaired, WilcoxonTost


def _num(x: float) -> str:
    return f"{x:+.4f}"


def _p(p: float) -> str:
    return f"p = {p:.3g}" if p >= 0.001 else "p < 0.001"


def describe(result: Any, alpha: float = 0.05) -> str:
    """A one-line sentence stating what a paired-t, TOST (paired or Welch), non-inferiority, minimal-effect,
    Wilcoxon (test or TOST) or sign-flip result shows.

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
    if isinstance(result, TwoOneSided) and result.kind == "equivalence":
        df = result.df if isinstance(result.df, int) else f"{result.df:.3g}"  # a Welch df is not an integer
        level = f"{100 * (1 - 2 * result.alpha):g}%"
        which = "lower" if result.p_lower >= result.p_upper else "upper"
        t = result.t_lower if which == "lower" else result.t_upper
        verdict = ("equivalent within the bounds" if result.equivalent
                   else "not shown equivalent (the interval reaches a bound)")
        return (f"Mean difference {_num(result.mean)}, {level} CI [{_num(result.ci_low)}, {_num(result.ci_high)}], "
                f"bounds [{_num(result.low)}, {_num(result.high)}]; the {which} test gives t({df}) = {t:.3g}, "
                f"{_p(result.p)}: {verdict} at α = {result.alpha:g}.")
    if isinstance(result, NonInferiority):
        level = f"{100 * (1 - 2 * result.alpha):g}%"
        verdict = "non-inferior" if result.holds else "not shown non-inferior"
        return (f"Mean difference {_num(result.mean)}, lower end of the {level} CI {_num(result.lower)} against "
                f"margin {_num(-result.margin)}, t({result.df}) = {result.t:.3g}, {_p(result.p)}: {verdict} "
                f"at α = {result.alpha:g}.")
    if isinstance(result, TwoOneSided):  # kind "minimal-effect"
        level = f"{100 * (1 - 2 * result.alpha):g}%"
        verdict = "an effect outside the bounds" if result.shown else "not shown outside the bounds"
        return (f"Mean difference {_num(result.mean)}, {level} CI [{_num(result.ci_low)}, {_num(result.ci_high)}], "
                f"bounds [{_num(result.low)}, {_num(result.high)}]; minimal-effect test {_p(result.p)}: {verdict} "
                f"at α = {result.alpha:g}.")
    if isinstance(result, WilcoxonPaired):
        level = f"{100 * result.ci_level:.3g}%"
        null = {"two-sided": "different from 0", "greater": "greater than 0", "less": "less than 0"}[result.alternative]
        verdict = null if result.p < alpha else f"not shown {null}"
        how = "exact" if result.exact else "normal approximation"
        ci = (f"{level} CI [{_num(result.ci[0])}, {_num(result.ci[1])}]" if result.ci_level > 0
              else "no interval (no two non-zero differences differ)")
        return (f"Hodges–Lehmann estimate {_num(result.hl)}, {ci}, "
                f"signed-rank T+ = {result.statistic:g} ({how}), {_p(result.p)}: {verdict} at α = {alpha:g}.")
    if isinstance(result, WilcoxonTost):
        verdict = "equivalent within the bounds" if result.equivalent else "not shown equivalent"
        return (f"Hodges–Lehmann estimate {_num(result.hl)}, bounds [{_num(result.low)}, {_num(result.high)}]; "
                f"signed-rank TOST {_p(result.p)}: {verdict} at α = {result.alpha:g}.")
    if isinstance(result, SignFlip):
        null = {"two-sided": "different from", "greater": "greater than", "less": "less than"}[result.alternative]
        value = "0" if result.null == 0 else _num(result.null)
        verdict = f"{null} {value}" if result.p < alpha else f"not shown {null} {value}"
        how = (f"exact over {result.n_resamples} sign patterns" if result.exact
               else f"{result.n_resamples} random sign patterns")
        return (f"Mean difference {_num(result.mean)}, sign-flip permutation test ({how}) {_p(result.p)}: "
                f"{verdict} at α = {alpha:g}.")
    raise ValueError(f"describe() takes a PairedT, TwoOneSided, NonInferiority, WilcoxonPaired, "
                     f"WilcoxonTost or SignFlip result, got {type(result).__name__}")
