"""The recheck table for the whole registry: every printed p-value recomputed from its printed
mean, 95% CI and n (``prereg recheck --all``), as Markdown and CSV."""

from __future__ import annotations

import csv
from pathlib import Path

from prereg_kit.registry import recheck

OUTPUT = "recheck_table.md"
DESCRIPTION = "Recheck of every reported p-value in the registry against its printed mean, 95% CI and n (rounding allowed)"
INPUTS = "registry/*/plan.toml, registry/*/reported.toml"

COLUMNS = ["study", "row", "source", "n", "printed", "test", "status", "basis", "checks", "explanation"]


def _root(root) -> Path:
    return Path(root) if root is not None else Path(__file__).resolve().parents[1] / "registry"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def build(out_dir: Path, root: Path | None = None) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = recheck(_root(root))
    counts = res.counts()
    md = ["# Recheck of the reported p-values (rebuilt from reported summaries)", "",
          "Each printed p-value is recomputed from the row's printed mean, 95% paired-t interval and n, letting every "
          "printed number vary over its rounding interval (`prereg_kit.stats.from_summary`); Holm values are checked "
          "exactly when every member of the family has a printed row, else against [p, m·p]. "
          "`consistent*`: consistent only with a Holm family size inferred from the printed value.", "",
          "**Summary:** " + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" ({len(res.rows)} rows; "
          f"{len(res.unexplained)} unexplained).", "",
          "| study | row | source | n | printed Δ [95% CI] | printed test | status | recomputed | explanation |",
          "|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for r in res.rows:
        status = r.status + ("*" if "inferred" in r.basis and r.status == "consistent" else "")
        detail = "; ".join(r.checks) + (f" [{r.basis}]" if r.basis else "")
        md.append("| " + " | ".join(_cell(x) for x in (r.study, r.row, r.source, r.n or "", r.printed, r.test, status,
                                                     detail, r.explanation)) + " |")
        rows.append({"study": r.study, "row": r.row, "source": r.source, "n": r.n or "", "printed": r.printed,
                     "test": r.test, "status": status, "basis": r.basis, "checks": "; ".join(r.checks),
                     "explanation": r.explanation})
    if res.skipped:
        md += ["", "Studies without a reported record: " + ", ".join(res.skipped) + "."]
    with open(out_dir / "recheck_table.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    path = out_dir / OUTPUT
    path.write_text("\n".join(md) + "\n")
    return path
