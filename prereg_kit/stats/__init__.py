"""Statistics of the dense-rewards paper as pure functions on arrays.

Paired t over seeds, Holm families, TOST equivalence, non-inferiority, the seed bootstrap (with
exact enumeration at small n) and the crossed seed-by-problem bootstrap, unbiased pass@k, exact
power and seed-count planning, recomputation of printed rows, and the verdict of a contrast.
Beside them: effect sizes with noncentral-t intervals, robust tests (Wilcoxon signed-rank with
Hodges–Lehmann, the exact sign-flip test), minimal-effect tests, Holm's step-up relatives, BCa and
studentized seed bootstraps, rliable's aggregates over runs × tasks, power solved for any unknown,
and group-sequential boundaries. Differences are fractions (0.01 is one point). See
``docs/statistics.md``.
"""

from ._checks import deprecated
from .adjust import adjust
from .aggregates import Aggregate, PerformanceProfile, iqm, performance_profile, probability_of_improvement
from .bootstrap import CrossedBootstrap, SeedBootstrap, crossed_bootstrap, seed_bootstrap, zero_p_note
from .describe import describe
from .effect_size import (
    EffectSizeArms,
    EffectSizePaired,
    effect_size_from_stats,
    effect_size_paired,
    effect_size_paired_arms,
)
from .equivalence import (
    NonInferiority,
    TwoOneSided,
    noninferiority,  # noqa: F401 - a deprecated name, kept for one release
    noninferiority_from_stats,
    noninferiority_paired,
    tost_from_stats,
    tost_paired,
)
from .minimal_effect import (
    minimal_effect_paired,
    minimal_effect_test,  # noqa: F401 - a deprecated name, kept for one release
)
from .multiplicity import holm
from .paired import PairedT, paired_t, paired_t_from_stats
from .passk import pass_at_k
from .power import (
    SeedsNeeded,
    power_noninferiority,  # noqa: F401 - a deprecated name, kept for one release
    power_noninferiority_paired,
    power_paired_t,
    power_tost_paired,
    seeds_needed,
)
from .power_solve import PowerSolution, solve_power_paired
from .sequential import SequentialBoundaries, classical_boundaries, crossing_probabilities, sequential_boundaries
from .sequential_t import SequentialTBoundaries, sequential_t_boundaries, t_crossing_probabilities
from .signflip import SignFlip, SignFlipInterval, sign_flip_ci, sign_flip_test
from .summary import (
    BootstrapRecompute,
    BootstrapSummaryCheck,
    ReportedCheck,
    SummaryCheck,
    bootstrap_from_summary,
    bootstrap_from_values,
    from_summary,
)
from .summary_stats import DzPCheck, TostSummary, p_from_dz, tost_summary
from .verdict import Verdict, verdict
from .welch import WelchNonInferiority, WelchT, noninferiority_welch, tost_welch, welch_t
from .wilcoxon import WilcoxonPaired, WilcoxonTost, wilcoxon_paired, wilcoxon_tost

__all__ = [
    "effect_size_from_stats",
    "noninferiority_from_stats",
    "paired_t_from_stats",
    "PowerSolution",
    "solve_power_paired",
    "tost_from_stats",
    "TostSummary",
    "tost_summary",
    "DzPCheck",
    "p_from_dz",
    "Aggregate",
    "PerformanceProfile",
    "iqm",
    "performance_profile",
    "probability_of_improvement",
    "adjust",
    "minimal_effect_paired",
    "CrossedBootstrap",
    "EffectSizeArms",
    "EffectSizePaired",
    "NonInferiority",
    "PairedT",
    "ReportedCheck",
    "SeedBootstrap",
    "SeedsNeeded",
    "SummaryCheck",
    "TwoOneSided",
    "Verdict",
    "crossed_bootstrap",
    "describe",
    "effect_size_paired",
    "effect_size_paired_arms",
    "from_summary",
    "bootstrap_from_summary",
    "bootstrap_from_values",
    "BootstrapRecompute",
    "BootstrapSummaryCheck",
    "holm",
    "noninferiority_paired",
    "paired_t",
    "pass_at_k",
    "power_noninferiority_paired",
    "power_paired_t",
    "power_tost_paired",
    "seed_bootstrap",
    "zero_p_note",
    "seeds_needed",
    "SequentialBoundaries",
    "SequentialTBoundaries",
    "classical_boundaries",
    "crossing_probabilities",
    "sequential_boundaries",
    "sequential_t_boundaries",
    "t_crossing_probabilities",
    "sign_flip_ci",
    "sign_flip_test",
    "SignFlip",
    "SignFlipInterval",
    "tost_paired",
    "verdict",
    "WelchNonInferiority",
    "WelchT",
    "noninferiority_welch",
    "tost_welch",
    "welch_t",
    "WilcoxonPaired",
    "WilcoxonTost",
    "wilcoxon_paired",
    "wilcoxon_tost",
]

# Names kept for one release, each warning when used (DeprecationWarning): the functions are
# ``noninferiority``, ``minimal_effect_test`` and ``power_noninferiority`` above (one order,
# ``<test>_<design>``: ``noninferiority_paired``, ``minimal_effect_paired``,
# ``power_noninferiority_paired``); the result types below are one ``TwoOneSided`` now.
_OLD_TYPES = {"Tost": "TwoOneSided", "MinimalEffect": "TwoOneSided", "WelchTost": "TwoOneSided"}


def __getattr__(name: str):
    if name in _OLD_TYPES:
        deprecated(name, _OLD_TYPES[name])
        return globals()[_OLD_TYPES[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
