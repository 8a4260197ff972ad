"""Tables 3-4 of the dense-rewards paper (every matched-compute contrast), rebuilt from the registry.

Reads every ``registry/*/reported.toml`` row that carries ``table = "3"`` or ``"4"`` and writes
``table3_4.md`` (both tables, by the paper's blocks) plus ``table3.csv`` and ``table4.csv``. Rows
lost in the PDF conversion (all of Table 4, the last two blocks of Table 3) are rebuilt from
Figures 7-8 and Table 15 and marked †.

The test column gives TOST at ±0.02 for every row, as Table 3's caption says (Table 4's
is "As in Table 3"): the studies on Qwen2.5-1.5B preregistered ±0.01 (S28, S31-S33,
§C.1 "Statistics"), and their ±0.01 values go to the text below each table. Where the paper prints the
±0.02 value (S31's T2, §C.5.6) the column uses it; otherwise it is computed from the row's printed
mean, interval and n (:func:`prereg_kit.stats.summary.from_summary`) and marked ‡
(:func:`figures.paper_tables.printed_test`, which Figures 7-8 use too).
"""

from __future__ import annotations

import csv
from pathlib import Path

from figures.paper_tables import PrintedRow, printed_rows, printed_test, table_blocks

OUTPUT = "table3_4.md"
DESCRIPTION = "Tables 3-4: every matched-compute contrast, rebuilt from reported summaries († = row lost in the PDF, rebuilt from Figures 7-8 / Table 15)"
INPUTS = "registry/*/reported.toml (rows with table = 3 or 4)"

COLUMNS = ["table", "block", "label", "model", "n", "mean", "ci_low", "ci_high", "test", "study", "source", "rebuilt"]


def _root(root) -> Path:
    return Path(root) if root is not None else Path(__file__).resolve().parents[1] / "registry"


def _interval(r) -> str:
    if r.mean is None:
        return f"{r.values} (no intervals printed)" if r.values else "(no interval printed)"
    return f"{r.mean} [{r.ci_low}, {r.ci_high}]" if r.ci_low is not None else r.mean


def table_test(pr: PrintedRow, root: Path, rows: list[PrintedRow] | None = None) -> tuple[str, str]:
    """The row's test column at ±0.02, and its ±0.01 value for the text ("" if none)
    (:func:`figures.paper_tables.printed_test`, Table 3's caption)."""
    return printed_test(pr, root, rows)


def build(out_dir: Path, root: Path | None = None) -> Path:
    base = _root(root)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = ["# Tables 3-4 — every matched-compute contrast (rebuilt from reported summaries)", "",
          "Rebuilt from the registry's reported records (`registry/*/reported.toml`), not from run logs. "
          "Δ is held-out accuracy of the configuration minus outcome-only GRPO (or the named control) on the same "
          "seeds, as a fraction (0.01 = one point), with its printed 95% paired-t interval. "
          "† marks rows lost in the PDF conversion and rebuilt from Figures 7-8 and Table 15 (their block is assigned "
          "from the table captions). Tests are as printed: \"Holm\" = preregistered primary, Holm-adjusted within its study; "
          "\"TOST\" is the equivalence p at ±0.02 for every row, also in the studies on Qwen2.5-1.5B that preregistered "
          "±0.01 (S28, S31-S33), whose ±0.01 values are given below each table (Table 3's caption). ‡: the ±0.02 p "
          "is not printed in the text; computed from the printed mean, 95% interval and n.", ""]
    every = printed_rows(base)
    for table in ("3", "4"):
        rows_csv, text = [], []
        md += [f"## Table {table}", "", "| method | model, training pool | n | Δ accuracy [95% CI] | test | study | source |",
               "|---|---|---|---|---|---|---|"]
        for block, rows in table_blocks(base, table):
            md.append(f"| **{block}** | | | | | | |")
            for pr in rows:
                r = pr.row
                mark = " †" if r.rebuilt else ""
                test, at01 = table_test(pr, base, every)
                if at01:
                    text.append(f"- {pr.study}, {r.label} ({r.model}): {at01} ({r.source})")
                md.append(f"| {r.label}{mark} | {r.model} | {r.n or ''} | {_interval(r)} | {test} | {pr.study} | {r.source} |")
                rows_csv.append({"table": table, "block": block, "label": r.label, "model": r.model, "n": r.n or "",
                                 "mean": r.mean or r.values, "ci_low": r.ci_low or "", "ci_high": r.ci_high or "",
                                 "test": test, "study": pr.study, "source": r.source, "rebuilt": int(r.rebuilt)})
        md.append("")
        if text:
            md += [f"Equivalence at the preregistered ±0.01 (Table {table}'s ±0.01 studies):", "", *text, ""]
        with open(out_dir / f"table{table}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(rows_csv)
    path = out_dir / OUTPUT
    path.write_text("\n".join(md) + "\n")
    return path
