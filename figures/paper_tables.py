"""The dense-rewards paper's printed rows, arranged as its tables and figures.

Reads each registry study's reported record (``reported.toml``, the numbers as the paper prints
them) and groups its rows the way Tables 3-4 and Figures 7-8 show them; the builders in this
package draw them.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from pathlib import Path

from prereg_kit.registry import REPORTED_FILE, Reported, ReportedRow, load_reported, study_dirs
from prereg_kit.stats.summary import parse_number


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


def printed_rows(root: str | Path) -> list[PrintedRow]:
    """Every reported row of the registry (dense-rewards paper), in folder order."""
    out = []
    for d, rep in load_all_reported(root):
        out.extend(PrintedRow(rep.study, d.name, r) for r in rep.rows)
    return out


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
"""The bold block headers of Figures 7 (L2702, L2735) and 8 (L2821, L2857, L2872, L2881, L2905),
each with the source line it is printed on; a row belongs to the last header printed above it."""


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
