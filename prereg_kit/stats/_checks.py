"""Shared input validation and small helpers for :mod:`prereg_kit.stats`.

Rules applied everywhere (stated once here, repeated in ``docs/statistics.md``):

- Inputs are converted to 1-D float arrays; infinite values are errors.
- **NaN rule:** a pair with a NaN in either arm is dropped; the number of dropped pairs is
  reported in the result as ``n_dropped``. Fewer than two complete pairs is an error.
- User errors raise :class:`ValueError` with a one-line message.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import fields
from typing import Any

import numpy as np

# One reading of a margin for the whole kit; the stats modules take it from here.
from ..margin import margin_bounds as equivalence_bounds  # noqa: F401
from ..margin import positive_margin  # noqa: F401

ALTERNATIVES = ("two-sided", "greater", "less")


def deprecated(old: str, new: str) -> None:
    """Warn (DeprecationWarning, at the caller's line) that ``old`` of ``prereg_kit.stats`` is
    deprecated in favour of ``new``; an old name is kept for one release."""
    warnings.warn(f"prereg_kit.stats: {old} is deprecated, use {new} (the old name goes in the next release)",
                  DeprecationWarning, stacklevel=3)


class Result:
    """Mixin for the frozen result dataclasses: ``to_dict()`` with plain Python values and
    ``to_frame()``, the same as a one-row pandas DataFrame."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    def to_frame(self) -> Any:
        """One row, one column per scalar field (None reads NaN); a pair of
        numbers (an interval) becomes ``<field>_low`` and ``<field>_high``; a sequence of results
        or values is left out (``to_dict()`` holds it; ``pd.concat(x.to_frame() for x in ...)``
        makes its table)."""
        import pandas as pd  # the statistics need no pandas until a table is asked for

        row: dict[str, Any] = {}
        for name, value in self.to_dict().items():
            if isinstance(value, list) and len(value) == 2 and all(_number(v) for v in value):
                row[f"{name}_low"], row[f"{name}_high"] = value
            elif not isinstance(value, (list, dict)):
                row[name] = np.nan if value is None else value
        return pd.DataFrame([row])


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain(value: Any) -> Any:
    if isinstance(value, Result):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def as_vector(x: Any, name: str) -> np.ndarray:
    """A 1-D float array; raises on wrong shape, non-numeric or infinite values."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if np.isinf(arr).any():
        raise ValueError(f"{name} contains infinite values")
    return arr


def paired_differences(treatment: Any, control: Any = None, *, min_n: int = 2) -> tuple[np.ndarray, int]:
    """Paired differences ``treatment - control`` (or ``treatment`` itself when ``control`` is None).

    Pairs with a NaN in either arm are dropped; returns ``(differences, n_dropped)``.
    """
    t = as_vector(treatment, "treatment" if control is not None else "differences")
    if control is None:
        d = t
    else:
        c = as_vector(control, "control")
        if t.shape != c.shape:
            raise ValueError(
                f"treatment and control have different lengths ({t.size} vs {c.size}); pairs must match by seed"
            )
        d = t - c
    keep = ~np.isnan(d)
    n_dropped = int(d.size - keep.sum())
    d = d[keep]
    if d.size < min_n:
        extra = f" after dropping {n_dropped} pair(s) with NaN" if n_dropped else ""
        raise ValueError(f"need at least {min_n} complete pairs, got {d.size}{extra}")
    return d, n_dropped


def check_alternative(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}; got {alternative!r}")
    return alternative


def check_confidence(confidence: float) -> float:
    c = float(confidence)
    if not 0.0 < c < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    return c


def check_alpha(alpha: float) -> float:
    a = float(alpha)
    if not 0.0 < a < 0.5:
        raise ValueError(f"alpha must lie strictly between 0 and 0.5, got {alpha!r}")
    return a


def make_rng(seed: Any) -> np.random.Generator:
    """A numpy Generator from an int, a SeedSequence or a Generator (no global state)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (bool, np.bool_)) or seed is None:
        raise ValueError("seed must be an int or a numpy Generator (randomness is explicit)")
    if isinstance(seed, (int, np.integer, np.random.SeedSequence)):
        return np.random.default_rng(seed)
    raise ValueError(f"seed must be an int or a numpy Generator, got {type(seed).__name__}")


def safe_ratio(num: float, den: float) -> float:
    """``num / den`` with the zero-spread limit: ``±inf`` when den is 0, and 0 when both are."""
    if den > 0:
        return num / den
    if num == 0:
        return 0.0
    return math.copysign(math.inf, num)


def positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)
