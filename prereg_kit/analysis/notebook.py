"""What a notebook shows of an analysis or a loaded report: one summary row per contrast.

``summary_frame`` picks, from the tidy contrast table, the columns a reader needs to see a verdict
and its evidence; :class:`Shown` gives an analysis its ``summary()``, a short ``repr`` and
``_repr_html_`` built on it (a title line, the summary table, counts of the rest), instead of a
dump of every DataFrame.
"""

from __future__ import annotations

import html as _html

import pandas as pd

#: summary column -> the contrast table's column it copies
SUMMARY_COLUMNS = {"id": "contrast", "tier": "tier", "kind": "kind", "treatment": "treatment", "control": "control",
                   "at": "at", "n": "n", "mean": "mean", "ci_low": "ci_low", "ci_high": "ci_high",
                   "p": "tested_p", "p_adj": "p_adjusted", "verdict": "verdict"}


def summary_frame(contrasts: pd.DataFrame) -> pd.DataFrame:
    """One row per contrast: id, tier, kind, treatment, control, at, n, mean, ci_low, ci_high,
    ``p`` (the p its kind tests: paired-t for superiority, TOST for equivalence, the one-sided
    test for non-inferiority), ``p_adj`` (Holm within its family; NaN outside one) and verdict.
    A to-target row's mean and CI are its share of the budget; a row not read has NaN numbers."""
    out = pd.DataFrame({new: contrasts[old] if old in contrasts.columns else pd.Series(pd.NA, index=contrasts.index)
                        for new, old in SUMMARY_COLUMNS.items()})
    return out.reset_index(drop=True)


def _title(study: str, title: str, *, synthetic: bool, exploratory: bool) -> str:
    marks = " [SYNTHETIC]" * bool(synthetic) + " [EXPLORATORY]" * bool(exploratory)
    return f"{study}: {title}{marks}"


class Shown:
    """Mixin of :class:`~prereg_kit.analysis.analyze.Analysis` and :class:`~prereg_kit.api.Report`:
    ``summary()``, a short ``repr`` and the notebook's HTML display. Reads ``contrasts``,
    ``per_seed``, ``exclusions``, ``notes``, ``synthetic``, ``exploratory`` and the study's id and
    title (from ``plan.study``, or the ``study`` and ``title`` fields)."""

    def summary(self) -> pd.DataFrame:
        """One row per contrast with its verdict and evidence (:func:`summary_frame`)."""
        return summary_frame(self.contrasts)

    def _heading(self) -> str:
        plan = getattr(self, "plan", None)
        study, title = (plan.study.id, plan.study.title) if hasattr(plan, "study") else (self.study, self.title)
        return f"{type(self).__name__} of " + _title(study, title, synthetic=self.synthetic, exploratory=self.exploratory)

    def _counts(self) -> str:
        return (f"{len(self.per_seed)} per-seed values, {len(self.exclusions)} exclusion(s), {len(self.notes)} note(s); "
                "tables: .contrasts .per_seed .configurations .curves .exclusions .hypotheses .checks")

    def __repr__(self) -> str:
        table = self.summary().to_string(index=False, float_format=lambda x: f"{x:.3g}")
        return f"<{self._heading()}>\n{table}\n{self._counts()}"

    def _repr_html_(self) -> str:
        table = self.summary().to_html(index=False, float_format=lambda x: f"{x:.3g}", na_rep="—")
        return (f"<div><p><b>{_html.escape(self._heading())}</b></p>{table}"
                f"<p><small>{_html.escape(self._counts())}</small></p></div>")
