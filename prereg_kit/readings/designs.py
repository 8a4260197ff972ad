"""The units of a contrast beyond one seed-paired difference (dense-rewards paper §C.1 "Statistics").

- *Paired*: per seed, treatment − control (:func:`paired_readings`).
- *Difference of differences*: per seed, (T − C) − (T' − C'), both pairs read at the same point
  on the seeds all four configurations share (S3's interaction, S17's lead difference).
- *Pooled*: the (pair, seed) differences of several pairs, one unit each ("(model size, seed)
  pairs pooled"; S5, S33).
- *Welch*: two unpaired groups, each configuration's values at a token reading point, or each
  pair's per-seed differences (S21's primary, §C.5.2: different runs, pools and test sets).

Every reading returns a tidy table of units: ``unit`` (the pair or group a unit belongs to),
``seed``, ``treatment_value``, ``control_value``, ``difference`` (the unit's value in the
contrast: NaN for a Welch unit, whose value is in its group's column), ``read_at``, ``group``
(``first`` / ``second`` for Welch, else ``""``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..plan import ReadingPoint
from .base import PairingError, exclusions_table
from .pairing import PairedReadings, paired_readings
from .points import read_at_tokens

UNIT_COLUMNS = ["unit", "seed", "treatment_value", "control_value", "difference", "read_at", "group"]


@dataclass
class DesignReadings:
    """``units`` (:data:`UNIT_COLUMNS`); ``values``: the per-unit differences (paired designs) or
    the two groups' values (``welch``); ``exclusions`` as in :class:`PairedReadings`; ``paired``:
    the :class:`PairedReadings` of a plain paired contrast (for the crossed bootstrap)."""

    design: str
    units: pd.DataFrame
    values: tuple[np.ndarray, ...]
    exclusions: pd.DataFrame
    paired: PairedReadings | None = None


def _units(pr: PairedReadings, unit: str, group: str = "") -> pd.DataFrame:
    t = pr.table
    return pd.DataFrame({"unit": unit, "seed": t["seed"].astype("int64"), "treatment_value": t["treatment"],
                         "control_value": t["control"], "difference": t["difference"], "read_at": t["at"],
                         "group": group}, columns=UNIT_COLUMNS)


def _label(t: str, c: str) -> str:
    return f"{t} − {c}"


def design_readings(curves: pd.DataFrame, design: str, pairs: list[tuple[str, str]], point: ReadingPoint, *,
                    problem_acc: pd.DataFrame | None = None, allow_unpaired: bool = False,
                    common_random_numbers: bool = True) -> DesignReadings:
    """Read one contrast of ``design`` on ``pairs`` ((treatment, control) pairs as
    :meth:`Contrast.arm_pairs` gives them) at ``point``; ``curves`` hold only the seeds the
    contrast reads. Unpaired or unreached runs raise :class:`PairingError` unless
    ``allow_unpaired`` (then they are listed in ``exclusions``); ``common_random_numbers=False``:
    pairs are not checked for equal evaluation sampling seeds (the plan preregistered it)."""
    if design == "paired":
        pr = paired_readings(curves, *pairs[0], point, problem_acc=problem_acc, allow_unpaired=allow_unpaired,
                             common_random_numbers=common_random_numbers)
        u = _units(pr, "")
        return DesignReadings(design, u, (u["difference"].to_numpy(),), pr.exclusions, pr)
    if design == "welch" and len(pairs) == 1:
        return _welch_configurations(curves, *pairs[0], point, allow_unpaired)
    reads = [paired_readings(curves, t, c, point, allow_unpaired=allow_unpaired,
                             common_random_numbers=common_random_numbers) for t, c in pairs]
    excl = pd.concat([r.exclusions for r in reads], ignore_index=True)
    if design == "pooled":
        u = pd.concat([_units(r, _label(t, c)) for r, (t, c) in zip(reads, pairs)], ignore_index=True)
        return DesignReadings(design, u, (u["difference"].to_numpy(),), excl)
    if design == "welch":
        u = pd.concat([_units(r, _label(t, c), g) for r, (t, c), g in zip(reads, pairs, ("first", "second"))],
                      ignore_index=True)
        first, second = (u.loc[u["group"] == g, "difference"].to_numpy() for g in ("first", "second"))
        u["treatment_value"] = u["difference"].where(u["group"] == "first")
        u["control_value"] = u["difference"].where(u["group"] == "second")
        u["difference"] = np.nan
        return DesignReadings(design, u, (first, second), excl)
    if design == "difference_of_differences":
        return _difference_of_differences(reads, pairs, excl, allow_unpaired)
    raise ValueError(f"unknown contrast design {design!r}")


def _difference_of_differences(reads: list[PairedReadings], pairs, excl: pd.DataFrame,
                               allow_unpaired: bool) -> DesignReadings:
    a, b = (r.table.set_index("seed") for r in reads)
    only = sorted(set(a.index) ^ set(b.index))
    if only and not allow_unpaired:
        s = only[0]
        has, lacks = (pairs[0], pairs[1]) if s in a.index else (pairs[1], pairs[0])
        raise PairingError(f"seed {s}: the difference {_label(*has)} has a reading, {_label(*lacks)} has none"
                           + (f" (and {len(only) - 1} more)" if len(only) > 1 else ""))
    rows = [(n, int(s), pd.NA, "unpaired", f"seed {s}: only one of the two differences has a reading")
            for s in only for n in (*pairs[0], *pairs[1])]
    seeds = sorted(set(a.index) & set(b.index))
    first, second = a.loc[seeds, "difference"].to_numpy(), b.loc[seeds, "difference"].to_numpy()
    u = pd.DataFrame({"unit": f"({_label(*pairs[0])}) − ({_label(*pairs[1])})", "seed": np.asarray(seeds, dtype="int64"),
                      "treatment_value": first, "control_value": second, "difference": first - second,
                      "read_at": a.loc[seeds, "at"].to_numpy(), "group": ""}, columns=UNIT_COLUMNS)
    excl = pd.concat([excl, exclusions_table(rows)], ignore_index=True) if rows else excl
    return DesignReadings("difference_of_differences", u, (u["difference"].to_numpy(),), excl)


def _welch_configurations(curves: pd.DataFrame, treatment: str, control: str, point: ReadingPoint,
                          allow_unpaired: bool) -> DesignReadings:
    """Each arm's runs read at k·B tokens on their own seeds, no pairing."""
    if point.kind != "tokens":
        raise PairingError(f"an unpaired (welch) contrast of two configurations is read at tokens, not {point.describe()}")
    groups, excl = [], []
    for name, g in ((treatment, "first"), (control, "second")):
        r = read_at_tokens(curves[curves["configuration"] == name], point.scaled)
        missing = r[~r["reached"]]
        if len(missing) and not allow_unpaired:
            m = missing.iloc[0]
            raise PairingError(f"configuration {name!r} seed {m['seed']} never reached its reading point "
                               f"({point.describe()}): {m['note']}")
        excl += [(name, int(m.seed), pd.NA, "not_reached", str(m.note)) for m in missing.itertuples()]
        r = r[r["reached"]].sort_values("seed")
        groups.append(pd.DataFrame({"unit": name, "seed": r["seed"].astype("int64"),
                                    "treatment_value": r["accuracy"] if g == "first" else np.nan,
                                    "control_value": r["accuracy"] if g == "second" else np.nan,
                                    "difference": np.nan, "read_at": r["at"], "group": g}, columns=UNIT_COLUMNS))
    u = pd.concat(groups, ignore_index=True)
    values = tuple(u.loc[u["group"] == g, "treatment_value" if g == "first" else "control_value"].to_numpy()
                   for g in ("first", "second"))
    return DesignReadings("welch", u, values, exclusions_table(excl))
