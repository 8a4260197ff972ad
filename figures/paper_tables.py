"""The dense-rewards paper's printed rows, arranged as its tables and figures.

Reads each registry study's reported record (``reported.toml``, the numbers as the paper prints
them) and groups its rows the way Tables 3-4 and Figures 7-8 show them; the builders in this
package draw them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from prereg_kit.plan import PLAN_FILE, load_plan
from prereg_kit.registry import REPORTED_FILE, Reported, ReportedRow, load_reported, study_dirs
from prereg_kit.stats.summary import from_summary, parse_number


def load_all_reported(root: str | Path) -> list[tuple[Path, Reported]]:
    """Every ``reported.toml`` under ``root`` with its folder (for the figure builders)."""
    return [(d, load_reported(d)) for d in study_dirs(root) if (d / REPORTED_FILE).exists()]


def value(text: str | None) -> float:
    """A printed number as a float (``"−0.143"`` → −0.143); NaN for None."""
    return math.nan if text is None else parse_number(text)[0]


TABLE_BLOCKS = {
    "3": ["Dense rewards within a completion",
          "At outcome-only GRPO's training time at B (768 tokens, strict reward, A100)",
          "Critic filter on Qwen3-0.6B and Qwen2.5-1.5B"],
    "4": ["Critic filter at the other four models", "Random choice of the filter's candidates", "Other selection rules",
          "Learning rate 2e-6, or decaying from it to 0 at B, minus 1e-6, same configuration and seeds",
          "Reward verification"],
}


@dataclass(frozen=True)
class PrintedRow:
    """A reported row with its study, for the table and figure builders."""

    study: str
    folder: str
    row: ReportedRow
    root: str = ""
    """The registry folder the row was read from ("" when not known), for its study's plan."""


def printed_rows(root: str | Path) -> list[PrintedRow]:
    """Every reported row of the registry (dense-rewards paper), in folder order."""
    out = []
    for d, rep in load_all_reported(root):
        out.extend(PrintedRow(rep.study, d.name, r, str(root)) for r in rep.rows)
    return out


TABLE_MARGIN = 0.02
"""The equivalence margin of Tables 3-4's test column and Figures 7-8's band (their captions)."""
_TOST_01 = re.compile(r"TOST\s*\(±0\.01\)\s*p\s*=\s*([^;,]+)")


def _study_margin(folder: Path, contrast: str | None) -> float | None:
    """The equivalence margin the study's plan gives the contrast (a symmetric one), else None."""
    if not (folder / PLAN_FILE).exists():
        return None
    plan = load_plan(folder / PLAN_FILE).plan
    try:
        m = plan.margin_of(plan.contrast(contrast)) if contrast else plan.statistics.margin
    except KeyError:
        m = plan.statistics.margin
    return float(m) if isinstance(m, (int, float)) else None


def format_p(p: float) -> str:
    """A p-value as the tables print it: ``.046``, or ``8×10^-5`` below .001."""
    if p >= 0.001:
        return f"{p:.3f}".lstrip("0")
    e = math.floor(math.log10(p))
    mant = round(p / 10 ** e)
    if mant == 10:
        mant, e = 1, e + 1
    return f"{mant}×10^{e}"


def printed_test(pr: PrintedRow, root: str | Path | None = None,
                rows: list[PrintedRow] | None = None) -> tuple[str, str]:
    """The row's test text with TOST at ±0.02, and its ±0.01 value ("" if none).

    Table 3's test column gives the equivalence p at ±0.02 for every row, also for the studies on
    Qwen2.5-1.5B that preregistered ±0.01 (Table 3's caption; Table 4 is "as in Table 3";
    Figures 7-8 plot the same contrasts over the same ±0.02 band, Figure 7's caption). A row of a ±0.01 study whose printed test gives "TOST(±0.01) p=…" gets
    the TOST p at ±0.02 in its place: as printed in the same study for the same contrast at
    ``margin = 0.02``, or computed from the printed mean, interval and n
    (:func:`prereg_kit.stats.summary.from_summary`) and marked ‡. ``root`` defaults to the
    registry the row was read from.
    """
    r = pr.row
    test = r.test or ""
    m = _TOST_01.search(test)
    base = Path(root if root is not None else pr.root)
    if m is None or not str(base) or _study_margin(base / pr.folder, r.contrast) != 0.01:
        return test, ""
    rows = printed_rows(base) if rows is None else rows
    printed = next((o.row.tost_p for o in rows if o.folder == pr.folder and o.row.contrast == r.contrast
                    and o.row.margin == TABLE_MARGIN and o.row.tost_p), None)
    if printed is not None:
        at02 = f"TOST p{'' if printed[0] in '<>≤≥' else '='}{printed}"
    else:
        p = from_summary(r.mean, r.ci_low, r.ci_high, r.n, margin=TABLE_MARGIN).tost_p
        at02 = f"TOST p≈{format_p(p)} ‡"
    return test[:m.start()] + at02 + test[m.end():], f"TOST at ±0.01 p={m.group(1).strip()}"


def figure_rows(root: str | Path, figure: int) -> list[PrintedRow]:
    """The rows of Figure 7 or 8, in the paper's order (by source line)."""
    rows = [r for r in printed_rows(root) if r.row.figure == figure and r.row.mean is not None and r.row.ci_low is not None]
    return sorted(rows, key=lambda r: (r.row.line or 0, r.study))


FIGURE_BLOCKS = {
    7: [(2702, "Dense rewards"), (2735, "Choice of prompts, Qwen3-0.6B and 1.7B")],
    8: [(2821, "Choice of prompts, Qwen2.5-1.5B"), (2857, "Choice of prompts, Qwen3-4B"),
        (2872, "Choice of prompts, Llama-3.2 (strict reward)"),
        (2881, "Learning rate 2e-6, or decaying from 2e-6 to 0, instead of 1e-6"),
        (2905, "Strict verifier instead of default as training reward")],
}
"""The bold block headers of Figures 7 and 8, each with the ``line`` it is printed on (the
position key of the registry's reported rows); a row belongs to the last header printed above it."""


def figure_blocks(root: str | Path, figure: int) -> list[tuple[str, list[PrintedRow]]]:
    """The rows of Figure 7 or 8 under the paper's block headers (:data:`FIGURE_BLOCKS`), in order.

    A row is placed under the last header whose source line precedes the row's; headers with no
    reported row are left out, and rows above the first header (none in the paper) come first
    under an empty header.
    """
    heads = sorted(FIGURE_BLOCKS.get(figure, []))
    groups: dict[str, list[PrintedRow]] = {}
    for r in figure_rows(root, figure):
        name = ""
        for line, head in heads:
            if (r.row.line or 0) > line:
                name = head
        groups.setdefault(name, []).append(r)
    order = [""] + [h for _, h in heads]
    return [(h, groups[h]) for h in order if h in groups]


def table_blocks(root: str | Path, table: str) -> list[tuple[str, list[PrintedRow]]]:
    """The rows of Table 3 or 4 by block, in the paper's block order and by source line within a block."""
    rows = [r for r in printed_rows(root) if r.row.table == table]
    names = list(TABLE_BLOCKS.get(table, []))
    names += sorted({r.row.block for r in rows} - set(names))
    return [(b, sorted([r for r in rows if r.row.block == b], key=lambda r: (r.row.line or 0, r.study)))
            for b in names if any(r.row.block == b for r in rows)]
