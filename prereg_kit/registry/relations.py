"""Cross-row checks of ``prereg recheck``: a printed row against other printed numbers of the same runs.

A row that prints n, a mean and a 95% interval but no test cannot be rechecked on its own beyond
the interval's centre. The dense-rewards paper ("Are Dense Rewards Worth Their Tokens in GRPO?")
states how its intervals are made — "means with 95% paired-t intervals over seeds" (§C.1,
"Statistics"; the captions of Tables 3, 6, 9, 10 and 13) — and that estimate rows pool "seeds
over several studies of the same configurations" (Table 3's caption), with the seed, or the
(model size, seed) pair, as the unit (§C.1). What follows from that method is checked here,
every printed number varying over its rounding interval (interval arithmetic):

- **same statistic** (``same_as``, ``printed_elsewhere``): one contrast on the same seeds printed
  twice (a table and the text, a fraction and points) gives the same n, mean and bounds;
- **per-seed difference or sum** (``difference_of``, ``sum_of``): on the same seeds and runs,
  C − O minus F − O is C − F seed by seed, so the row's mean is the difference (or sum) of the two
  means, and as a sample SD is a norm of the centred per-seed values, its SD lies between
  |s_a − s_b| and s_a + s_b (the triangle inequality);
- **pooled seeds** (``pooled_from``): a row over the union of disjoint seed sets has n = Σ nᵢ,
  mean Σ nᵢ·mᵢ / N, and SD from (N − 1)·S² = Σ (nᵢ − 1)·sᵢ² + Σ nᵢ·(mᵢ − M)², so its t interval's
  half-width is t(N − 1)·S/√N.

A paired-t interval's SD is s = h·√n / t(n − 1), h its half-width. The relations are declared in
``reported.toml`` on one row (``docs/registry.md``) and the result attaches to every row they
name, so a wrong number in any of them fails the check.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PreregError
from ..stats.tdist import t_ppf

UNIT_SCALE = {"fraction": 1.0, "points": 0.01, "ratio": 1.0}  # a printed number times this is a fraction
RELATION_KEYS = ("same_as", "difference_of", "sum_of", "pooled_from")
_NUMBER = r"[+-]?\d+(?:\.\d+)?"
_RANGE = re.compile(rf"^({_NUMBER})\s*[-–]\s*(\d+(?:\.\d+)?)$")
_EPS = 1e-12

Interval = tuple[float, float]


def _rounding(num: str) -> Interval:
    """The interval of values that round to ``num`` at its printed decimals (half a unit of the last digit)."""
    decimals = len(num.split(".")[1]) if "." in num else 0
    half = 0.5 * 10.0 ** -decimals
    x = float(num)
    return x - half, x + half


def printed_interval(text: str) -> Interval:
    """The values a printed number or range stands for: ``"0.82×"`` → [0.815, 0.825], ``"33%"`` →
    [32.5, 33.5], ``"0.254-0.282"`` → [0.2535, 0.2825] (a range spans its two ends' roundings)."""
    t = text.strip().replace("−", "-").replace("×", "").replace("%", "").replace(" ms", "").strip()
    m = _RANGE.match(t)
    if m:
        lo, hi = _rounding(m.group(1))[0], _rounding(m.group(2))[1]
        if lo > hi:
            raise ValueError(f"printed range {text!r}: its low end is above its high end")
        return lo, hi
    if not re.fullmatch(_NUMBER, t):
        raise ValueError(f"printed value {text!r}: not a number or a range of two numbers")
    return _rounding(t)


def _meets(a: Interval, b: Interval) -> bool:
    tol = _EPS + 1e-9 * max(abs(a[0]), abs(a[1]), abs(b[0]), abs(b[1]))
    return a[0] <= b[1] + tol and b[0] <= a[1] + tol


def _fmt(x: float) -> str:
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    s = f"{abs(x):.5f}".rstrip("0").rstrip(".") if abs(x) >= 0.001 else f"{abs(x):.2g}"
    return ("-" if x < 0 else "") + s


def _iv(a: Interval) -> str:
    return f"[{_fmt(a[0])}, {_fmt(a[1])}]"


# --------------------------------------------------------------------------- a printed row's numbers

@dataclass(frozen=True)
class Printed:
    """A printed row (or a second printing of it) as rounding intervals, in fraction units."""

    label: str
    n: int | None
    mean: Interval
    low: Interval | None
    high: Interval | None
    kind: str = "paired-t"
    confidence: float = 0.95
    text: str = ""  # the printing as the paper gives it, for the lines
    strings: tuple[str | None, str | None, str | None] = (None, None, None)  # printed mean, low, high

    @property
    def width_text(self) -> str:
        return f"half-width of [{self.strings[1]}, {self.strings[2]}]"

    @property
    def centre(self) -> Interval:
        """The mean: within its own rounding and, for a symmetric (paired-t) interval, at the centre
        of some interval that rounds to the printed bounds; the printed mean alone when they do
        not meet (the row's own recheck flags that)."""
        if self.kind != "paired-t" or self.low is None or self.high is None:
            return self.mean
        mid = ((self.low[0] + self.high[0]) / 2, (self.low[1] + self.high[1]) / 2)
        lo, hi = max(self.mean[0], mid[0]), min(self.mean[1], mid[1])
        return (lo, hi) if lo <= hi else self.mean

    @property
    def half(self) -> Interval:
        """The interval's half-width, over the bounds' rounding."""
        if self.low is None or self.high is None:
            raise ValueError(f"{self.label}: no printed interval")
        return max(0.0, (self.high[0] - self.low[1]) / 2), (self.high[1] - self.low[0]) / 2

    def t_factor(self, n: int | None = None) -> float:
        """t(n − 1)/√n at the row's confidence: half-width = factor · SD."""
        n = self.n if n is None else n
        if n is None or n < 2:
            raise ValueError(f"{self.label}: a t interval needs n ≥ 2")
        return t_ppf(1 - (1 - self.confidence) / 2, n - 1) / math.sqrt(n)

    @property
    def sd(self) -> Interval:
        """The per-seed SD a paired-t interval of this half-width and n implies: s = h·√n / t(n − 1)."""
        f = self.t_factor()
        h = self.half
        return h[0] / f, h[1] / f


def printed_row(label: str, *, mean: str | None, ci_low: str | None, ci_high: str | None, n: int | None,
                unit: str, ci_kind: str = "paired-t", confidence: float = 0.95) -> Printed:
    """A row's printed strings as a :class:`Printed` (points turned into fractions)."""
    if mean is None:
        raise ValueError(f"{label}: no printed mean")
    k = UNIT_SCALE[unit]

    def conv(s: str | None) -> Interval | None:
        if s is None:
            return None
        a, b = printed_interval(s)
        return a * k, b * k

    text = mean + (f" [{ci_low}, {ci_high}]" if ci_low is not None else "") + (" points" if unit == "points" else "")
    shown = tuple(None if x is None else x + (" pt" if unit == "points" else "") for x in (mean, ci_low, ci_high))
    return Printed(label, n, conv(mean), conv(ci_low), conv(ci_high), ci_kind, confidence, text, shown)


# --------------------------------------------------------------------------- the three relations

@dataclass
class Outcome:
    """One relation checked: whether it holds, its lines and its ``recheck --json`` records."""

    name: str
    ok: bool = True
    lines: list[str] = field(default_factory=list)
    tests: list[dict] = field(default_factory=list)

    def add(self, test: str, printed: str, recomputed: Interval, printed_iv: Interval, label: str,
            good: bool | None = None) -> None:
        good = _meets(recomputed, printed_iv) if good is None else good
        self.ok &= good
        self.lines.append(f"{label} {_iv(recomputed)} vs {printed} {_iv(printed_iv)}" + ("" if good else " MISMATCH"))
        self.tests.append({"test": test, "printed": printed, "recomputed": [recomputed[0], recomputed[1]], "match": bool(good)})

    def same_n(self, test: str, want: int | None, have: int | None, label: str) -> None:
        if want is None or have is None:
            return
        good = want == have
        self.ok &= good
        self.lines.append(f"{label}: n = {have}, expected {want}" + ("" if good else " MISMATCH"))
        self.tests.append({"test": test, "printed": str(have), "recomputed": [float(want), float(want)], "match": good})


def same_statistic(row: Printed, other: Printed) -> Outcome:
    """The same contrast on the same seeds printed twice: n, mean and each bound agree within both
    printings' rounding (a fraction and points compared as fractions)."""
    out = Outcome("same statistic")
    if row.kind != other.kind:
        out.ok = False
        out.lines.append(f"same as {other.label}: interval kinds differ ({row.kind}, {other.kind}) MISMATCH")
        return out
    out.same_n("same_n", other.n, row.n, f"same as {other.label}")
    out.add("same_mean", row.strings[0], other.mean, row.mean, f"{other.label} prints {other.text}: mean")
    for i, name, mine, theirs in ((1, "same_low", row.low, other.low), (2, "same_high", row.high, other.high)):
        if mine is not None and theirs is not None:
            out.add(name, row.strings[i], theirs, mine, f"  {name.split('_')[1]} bound")
    return out


def _paired(p: Printed) -> None:
    if p.kind != "paired-t" or p.n is None or p.low is None or p.high is None:
        raise ValueError(f"{p.label}: a per-seed relation needs a paired-t row with n and an interval")


def combination(row: Printed, a: Printed, b: Printed, sign: int) -> Outcome:
    """``row`` = ``a`` − ``b`` (sign −1) or ``a`` + ``b`` (sign +1) seed by seed on the same seeds:
    equal n, the mean is the difference (sum) of the means, and the row's SD lies in
    [|s_a − s_b|, s_a + s_b]."""
    for p in (row, a, b):
        _paired(p)
    op = "−" if sign < 0 else "+"
    out = Outcome("difference" if sign < 0 else "sum")
    for p in (a, b):
        out.same_n(f"{out.name}_n", row.n, p.n, f"{p.label}")
    ca, cb = a.centre, b.centre
    mean = (ca[0] - cb[1], ca[1] - cb[0]) if sign < 0 else (ca[0] + cb[0], ca[1] + cb[1])
    out.add(f"{out.name}_mean", row.strings[0], mean, row.centre, f"{a.label} {op} {b.label}: mean")
    sa, sb = a.sd, b.sd
    lo = max(0.0, sa[0] - sb[1], sb[0] - sa[1])
    out.add(f"{out.name}_sd", f"the SD of {row.width_text}", (lo, sa[1] + sb[1]), row.sd,
            "  per-seed SD between |s_a − s_b| and s_a + s_b")
    return out


def _pair_gap(a: Interval, b: Interval) -> float:
    """The smallest |x − y| over x in a and y in b."""
    return max(0.0, a[0] - b[1], b[0] - a[1])


def pooled(row: Printed, parts: list[Printed]) -> Outcome:
    """``row`` over the union of the parts' disjoint seed sets: n = Σ nᵢ, mean Σ nᵢ·mᵢ / N, and the
    half-width t(N − 1)·S/√N with (N − 1)·S² = Σ (nᵢ − 1)·sᵢ² + Σ nᵢ·(mᵢ − M)². The between-part
    term runs from the sum over pairs of its least value (a lower bound) to its largest over the
    corners of the means' box (it is convex in the means)."""
    for p in (row, *parts):
        _paired(p)
    out = Outcome("pooled")
    ns = [p.n for p in parts]
    total = sum(ns)
    out.same_n("pooled_n", total, row.n, "pooled " + " + ".join(f"{p.label} (n={p.n})" for p in parts))
    cs = [p.centre for p in parts]
    mean = (sum(n * c[0] for n, c in zip(ns, cs)) / total, sum(n * c[1] for n, c in zip(ns, cs)) / total)
    out.add("pooled_mean", row.strings[0], mean, row.centre, "  mean Σ nᵢ·mᵢ / N")
    between_lo = sum(ns[i] * ns[j] * _pair_gap(cs[i], cs[j]) ** 2
                     for i, j in itertools.combinations(range(len(parts)), 2)) / total
    between_hi = 0.0
    for corner in itertools.product(*cs):
        m = sum(n * x for n, x in zip(ns, corner)) / total
        between_hi = max(between_hi, sum(n * (x - m) ** 2 for n, x in zip(ns, corner)))
    within = [(n - 1) * p.sd[0] ** 2 for n, p in zip(ns, parts)], [(n - 1) * p.sd[1] ** 2 for n, p in zip(ns, parts)]
    s = (math.sqrt((sum(within[0]) + between_lo) / (total - 1)), math.sqrt((sum(within[1]) + between_hi) / (total - 1)))
    f = row.t_factor(total)
    out.add("pooled_half_width", row.width_text, (f * s[0], f * s[1]), row.half,
            f"  half-width t({total - 1})·S/√{total}, S in {_iv(s)}:")
    return out


# --------------------------------------------------------------------------- relations across the registry

@dataclass
class Attached:
    """A relation's outcome as one row sees it."""

    outcome: Outcome
    header: str


_CACHE: dict[tuple, tuple[dict, dict]] = {}


def _records(root: Path, load, filename: str) -> dict:
    """Every loadable record file under ``root`` (``load`` reads one), by folder name; an
    unloadable one is left to its own recheck, which reports the error."""
    recs = {}
    for f in sorted(root.glob(f"*/{filename}")):
        try:
            recs[f.parent.name] = load(f)
        except PreregError:
            continue
    return recs


def _signature(root: Path, filename: str) -> tuple:
    """The records' folders and contents (hashed): an edit, however small or quick, is seen."""
    return (str(root.resolve()),) + tuple((f.parent.name, hashlib.sha256(f.read_bytes()).hexdigest())
                                          for f in sorted(root.glob(f"*/{filename}")))


def _resolve(recs: dict, folder: str, ref: str):
    """``ROW`` in ``folder``'s record, or ``STUDY:ROW`` (a folder name or study id, any case)."""
    study, _, rid = ref.rpartition(":")
    target = folder
    if study:
        want = study.lower()
        hits = [k for k in recs if k.lower() == want] or [k for k, r in recs.items() if r.study.lower() == want]
        if not hits:
            raise ValueError(f"{ref}: no study {study!r} with a reported record")
        target = hits[0]
    rows = {r.id: r for r in recs[target].rows}
    if rid not in rows:
        raise ValueError(f"{ref}: no row {rid!r} in {target}")
    return target, rows[rid]


def _as_printed(row, label: str) -> Printed:
    return printed_row(label, mean=row.mean, ci_low=row.ci_low, ci_high=row.ci_high, n=row.n, unit=row.unit,
                       ci_kind=row.ci_kind if row.df is None else "welch", confidence=row.confidence)


def relation_index(root: Path, load, filename: str) -> tuple[dict, dict]:
    """(attached, errors) over the record files ``root/*/filename`` read by ``load``: per (folder,
    row id) the relation outcomes that concern the row; per folder the record errors of its
    relations (an unknown row, a row the relation cannot use). Cached on the files' contents."""
    sig = _signature(root, filename)
    if sig in _CACHE:
        return _CACHE[sig]
    recs = _records(root, load, filename)
    attached: dict[tuple[str, str], list[Attached]] = {}
    errors: dict[str, list[str]] = {}
    for folder, rep in recs.items():
        for row in rep.rows:
            for key in RELATION_KEYS:
                refs = getattr(row, key)
                if not refs:
                    continue
                refs = [refs] if isinstance(refs, str) else list(refs)
                try:
                    targets = [_resolve(recs, folder, ref) for ref in refs]
                    mine = _as_printed(row, row.id)
                    others = [_as_printed(r, ref) for ref, (_, r) in zip(refs, targets)]
                    if key == "same_as":
                        outcome = same_statistic(mine, others[0])
                    elif key == "pooled_from":
                        outcome = pooled(mine, others)
                    else:
                        outcome = combination(mine, others[0], others[1], -1 if key == "difference_of" else 1)
                except ValueError as e:
                    errors.setdefault(folder, []).append(f"{rep.study} row {row.id}: {key}: {e}")
                    continue
                attached.setdefault((folder, row.id), []).append(Attached(outcome, f"{key} {', '.join(refs)}"))
                for tf, r in targets:
                    here = f"{rep.study}:{row.id}" if tf != folder else row.id
                    attached.setdefault((tf, r.id), []).append(Attached(outcome, f"named by {here} ({key})"))
    _CACHE.clear()
    _CACHE[sig] = (attached, errors)
    return attached, errors


def merge(out, ok: bool, lines: list[str], tests: list[dict]) -> None:
    """A check's result into a rechecked row: its lines and records added; a failure makes the row
    ``inconsistent`` (``explained`` with an explanation); a row without a printed test that passes
    a check becomes ``consistent``."""
    out.checks.extend(lines)
    out.tests.extend(tests)
    if not ok:
        out.status = "explained" if out.explanation else "inconsistent"
    elif out.status in ("no test", "not checkable"):
        out.status = "consistent"


def apply_relations(d: Path, checked: list, load, filename: str) -> None:
    """Attach to the rechecked rows of study folder ``d`` every relation that names them, declared
    in this study's record or another's of the same registry folder (records ``*/filename``, read
    by ``load``). A relation this study declares that cannot be evaluated stops with exit 2."""
    attached, errors = relation_index(d.parent, load, filename)
    if errors.get(d.name):
        raise PreregError(*[f"{d / filename}: {e}" for e in errors[d.name]])
    for out in checked:
        for a in attached.get((d.name, out.row), []):
            merge(out, a.outcome.ok, [f"{a.outcome.name} ({a.header}):"] + [f"  {x}" for x in a.outcome.lines], a.outcome.tests)
