"""A study's own results as a registry record: the contrasts of ``prereg analyze`` written as
``reported.toml`` (schema: docs/registry.md), with ``paper = "prereg-kit"``.

A study run with prereg-kit then sits in the registry like the papers' studies: its printed
numbers are kept as text with the rounding of a paper table (4 decimals for means and intervals,
the report's p format), and ``prereg recheck`` re-derives every printed p-value from mean,
interval and n exactly as it does for the papers (dense-rewards paper §C.1 "Statistics"; ``stats.from_summary``).
A contrast whose per-seed differences are all equal (``zero_sd``: identical runs) has no t
statistic; its row keeps the mean and the zero-width interval as ``ci_kind = "none"``.

``python -m prereg_kit.registry.record STUDY_DIR ...`` analyzes each study and writes its record.
"""

from __future__ import annotations

import math
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import tomli_w

from ..analysis.analyze import analyze_study
from ..report import format_p
from . import REPORTED_FILE, load_reported

_P_KEYS = {"superiority": ("p", "holm_p"), "equivalence": ("tost_p", "tost_holm_p"),
           "non-inferiority": ("noninferiority_p", "noninferiority_holm_p")}
_P_COLUMN = {"superiority": "p", "equivalence": "tost_p", "non-inferiority": "ni_p"}


def _adjusted(c: dict[str, Any]):
    """The family-adjusted p of a results.json contrast (``p_holm`` in reports before 0.1.0)."""
    return c.get("p_adjusted", c.get("p_holm"))


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def record_row(c: dict[str, Any], *, source: str) -> dict[str, Any]:
    """One reported row from one row of ``Analysis.contrasts`` (a dict)."""
    label = c.get("comparison") or f"{c['treatment']} − {c['control']}"
    if c.get("metric") not in (None, "", "accuracy"):
        label += f" ({c['metric']})"
    row: dict[str, Any] = {"id": c["contrast"], "contrast": c["contrast"], "label": label, "at": str(c["at"]),
                           "n": int(c["n"]), "mean": _signed(c["mean"]), "ci_low": _signed(c["ci_low"]),
                           "ci_high": _signed(c["ci_high"]), "tier": c["tier"], "test": c["kind"], "source": source}
    if isinstance(c.get("target"), float) and math.isfinite(c["target"]):  # Table 11: a share, no paired t
        share = lambda x: "n.r." if math.isinf(x) else f"{x:.4f}"  # noqa: E731
        row.update(mean=share(c["mean"]), ci_low=share(c["ci_low"]), ci_high=share(c["ci_high"]), ci_kind="none",
                   note=f"share of the budget to reach {c['target']:.4f} (the control's mean accuracy), seed-bootstrap interval")
        return row
    if bool(c.get("zero_sd")) or not math.isfinite(float(c.get("t", math.nan))):
        row["ci_kind"] = "none"
        row["note"] = "every seed's difference is the same (identical runs): no t statistic"
        return row
    test = c.get("test") if isinstance(c.get("test"), str) and c.get("test") else "t"  # NaN: no robust columns
    if test != "t" or c["kind"] not in _P_KEYS:
        # The p of a named robust test or a minimal-effect test cannot be rebuilt from the paired-t
        # interval that recheck recomputes: record it in the note, not as a checked p.
        row["test"] = f"{c['kind']} ({test})"
        p_own, p_adj = c.get("test_p", c.get("p")), _adjusted(c)
        words = [f"p = {format_p(float(p_own))}"] if p_own is not None and math.isfinite(float(p_own)) else []
        if c.get("family") and p_adj is not None and math.isfinite(float(p_adj)):
            words.append(f"adjusted p = {format_p(float(p_adj))}")
        row["note"] = f"{test} test of a {c['kind']} contrast" + (f" ({', '.join(words)})" if words else "") + \
            "; recheck rebuilds only the paired-t interval"
        return row
    raw, holm = _P_KEYS[c["kind"]]
    row[raw] = format_p(float(c[_P_COLUMN[c["kind"]]]))
    p_adj = _adjusted(c)
    if c.get("family") and p_adj is not None and math.isfinite(float(p_adj)):
        row[holm] = format_p(float(p_adj))
    return row


def study_record(analysis, *, when: datetime | None = None) -> dict[str, Any]:
    """The ``reported.toml`` document of an analyzed study (``prereg_kit.analysis.analyze.Analysis``)."""
    when = when or datetime.now(timezone.utc)
    source = f"prereg analyze of the study's run logs, {when:%Y-%m-%d}"
    rows = [record_row(c, source=source) for c in analysis.contrasts.to_dict("records")]
    plan = analysis.plan
    return {"study": plan.study.id, "paper": "prereg-kit",
            "source": f"{plan.study.title}: `prereg analyze` of the run logs kept with the study (plan hash {analysis.plan_hash[:19]}…)",
            "notes": ["Rebuilt by `python -m prereg_kit.registry.record`; means and intervals rounded to 4 decimals."],
            "rows": rows}


def write_record(study_dir: str | Path, *, when: datetime | None = None) -> Path:
    """Analyze ``study_dir`` and write ``study_dir/reported.toml``; the written file is validated."""

    d = Path(study_dir)
    doc = study_record(analyze_study(d, progress=False), when=when)
    path = d / REPORTED_FILE
    header = ("# Results of this study as measured by prereg-kit (not a paper's numbers): `prereg analyze` of the\n"
              "# run logs kept with the study. Schema: docs/registry.md. Checked by `prereg recheck`.\n\n")
    path.write_text(header + tomli_w.dumps(doc), encoding="utf-8")
    load_reported(path)
    return path


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m prereg_kit.registry.record STUDY_DIR ...", file=sys.stderr)
        return 2
    for d in argv:
        print(f"wrote {write_record(d)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
