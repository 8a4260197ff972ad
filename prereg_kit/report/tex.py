"""``contrasts.tex``: every contrast as a booktabs LaTeX table in the layout of the dense-rewards paper's Tables 3–4.

Rows are grouped in blocks by tier (primary, secondary, exploratory; a ``\\multicolumn`` header row
each); the columns are the contrast, its comparison, where it is read, n, the mean difference, its
95% interval and the test as the paper prints it ("Holm p = .016", "TOST p = .083",
"exploratory"), p-values in the report's format with ``×10^{−k}`` as LaTeX math. No vertical rules.
The table needs ``\\usepackage{booktabs}``; every other character is escaped or written as math,
so it compiles under pdflatex's default UTF-8 input.
"""

from __future__ import annotations

import math
import re
from typing import Callable

import pandas as pd

TEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "<": r"$<$", ">": r"$>$", "|": r"$|$"}
# characters the report prints that pdflatex's default input encoding does not know
TEX_UNICODE = {"−": "$-$", "×": r"$\times$", "÷": r"$\div$", "†": r"\dag{}", "±": r"$\pm$", "Δ": r"$\Delta$",
               "α": r"$\alpha$", "…": r"\ldots{}", "—": "---", "–": "--", "≤": r"$\le$", "≥": r"$\ge$",
               "·": r"$\cdot$", "₁": r"$_1$", "₂": r"$_2$", "′": "'", "’": "'", "‘": "`", "“": "``", "”": "''"}
TIERS = ("primary", "secondary", "exploratory")
COLUMNS = ("Contrast", "Comparison", "Read at", "$n$", "Mean difference", "95\\% CI", "Test")
_E_NOTATION = re.compile(r"(<?)(\d(?:\.\d+)?)e([-+])0*(\d+)")  # format_p's 2e-04 and <1e-10


def tex_escape(text: object) -> str:
    """``text`` as LaTeX text: specials escaped, the report's non-ASCII symbols as math or macros;
    other non-ASCII characters are kept (they need a font that has them)."""
    return "".join(TEX_SPECIALS.get(ch) or TEX_UNICODE.get(ch) or ch for ch in str(text))


def tex_test(text: str) -> str:
    """A printed test (``Holm p = 2e-04; TOST p = .016``) in LaTeX: ``Holm $p$ = $2\\times10^{-4}$``;
    ``<1e-10`` becomes ``$<10^{-10}$``."""
    pieces, last = [], 0
    for m in _E_NOTATION.finditer(text):
        pieces.append(re.sub(r"\bp\b", "$p$", tex_escape(text[last:m.start()])))
        lt, mant, sign, exp = m.groups()
        power = f"10^{{{'-' if sign == '-' else ''}{exp}}}"
        pieces.append(f"${'<' if lt else ''}{power}$" if lt and mant == "1" else f"${'<' if lt else ''}{mant}\\times{power}$")
        last = m.end()
    pieces.append(re.sub(r"\bp\b", "$p$", tex_escape(text[last:])))
    return "".join(pieces)


def _num(x: float, fmt: str = "+.3f") -> str:
    return "---" if x is None or (isinstance(x, float) and math.isnan(x)) else f"${x:{fmt}}$"


def _share(x: float) -> str:
    return "n.r." if isinstance(x, float) and math.isinf(x) else _num(x, ".2f")


def _row(r: pd.Series, printed_test: Callable[[pd.Series], str], is_target: Callable) -> str:
    design = r.get("design", "paired") or "paired"
    comparison = tex_escape(r.get("comparison") or f"{r['treatment']} − {r['control']}")
    metric = str(r.get("metric") or "accuracy")
    if metric != "accuracy":
        comparison += f" ({tex_escape(metric)})"
    at = tex_escape(r["at"])
    cells = [tex_escape(r["contrast"]), comparison, at]
    if r.get("status") == "not read":
        return " & ".join(cells + ["---", "---", "---", "not read"]) + r" \\"
    n = f"{int(r['n_treatment'])} + {int(r['n_control'])}" if design == "welch" else str(r["n"])
    if is_target(r):  # a share of the budget (1 = no saving), not a difference
        cells[1] += " (share of B)"
        est, ci = _share(r["mean"]), f"[{_share(r['ci_low'])}, {_share(r['ci_high'])}]"
    else:
        est, ci = _num(r["mean"]), f"[{_num(r['ci_low'])}, {_num(r['ci_high'])}]"
    test = tex_test(printed_test(r))
    if r["tier"] == "exploratory":
        test = f"exploratory ({test})"
    return " & ".join(cells + [n, est, ci, test]) + r" \\"


def contrasts_tex(df: pd.DataFrame, *, caption: str, label: str, printed_test: Callable[[pd.Series], str],
                  is_target: Callable[[pd.Series], bool], synthetic: bool = False, exploratory: bool = False) -> str:
    """The LaTeX source of ``contrasts.tex``: one ``table`` with one row per contrast of ``df``
    (``contrasts.csv``'s columns), blocks by tier. ``caption`` is plain text (escaped here);
    ``printed_test`` gives a row's test column as the report prints it (``report.printed_test``).
    A synthetic or exploratory table says so in its caption and in a comment on its first line."""
    cap = tex_escape(caption)
    if exploratory:
        cap = r"\textbf{EXPLORATORY} (the preregistration checks failed; no confirmatory weight): " + cap
    if synthetic:
        cap = r"\textbf{SYNTHETIC} (runs simulated by \texttt{prereg dry-run}; no result): " + cap
    lines = [f"% {'SYNTHETIC: simulated runs from prereg dry-run. ' if synthetic else ''}"
             f"{'EXPLORATORY: the preregistration checks failed. ' if exploratory else ''}"
             "Written by prereg analyze; needs \\usepackage{booktabs}.",
             r"\begin{table}[t]", r"\centering", r"\small", f"\\caption{{{cap}}}",
             f"\\label{{tab:{re.sub(r'[^A-Za-z0-9:.-]', '-', label)}}}",
             r"\begin{tabular}{lllrrll}", r"\toprule", " & ".join(COLUMNS) + r" \\", r"\midrule"]
    tiers = list(TIERS) + sorted(set(df["tier"]) - set(TIERS)) if len(df) else []
    first = True
    for tier in tiers:
        rows = df[df["tier"] == tier]
        if not len(rows):
            continue
        if not first:
            lines.append(r"\addlinespace")
        first = False
        lines.append(f"\\multicolumn{{{len(COLUMNS)}}}{{l}}{{\\textit{{{tex_escape(tier.capitalize())} contrasts}}}} \\\\")
        lines += [_row(r, printed_test, is_target) for _, r in rows.iterrows()]
    if first:
        lines.append(f"\\multicolumn{{{len(COLUMNS)}}}{{l}}{{no contrasts}} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)
