"""The report's text outputs: a dry-run report says SYNTHETIC on its title, every table, CSV,
results.json, contrasts.tex and report.html (a real one nowhere); durations and token counts in
units that fit; the collapse column of a control that cannot change; contrasts.tex (booktabs,
escaped, Tables 3–4 blocks); report.html self-contained and rendered by a headless browser."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pandas as pd
import pytest
from paths import ROOT
from rich.console import Console

from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.plan import load_plan
from prereg_kit.report import (
    cannot_change,
    column_time_unit,
    console_table,
    format_tokens,
    is_target,
    printed_test,
    write_report,
)
from prereg_kit.report.html import render_html
from prereg_kit.report.tex import contrasts_tex, tex_test
from prereg_kit.simulate.dryrun import dry_run

pytestmark = pytest.mark.figures  # reads the report's figures (tests/conftest.py)

EXPLORATORY = '''
[[contrasts]]
id = "C3"
treatment = "grpo"
control = "frozen"
at = "0.5B"
tier = "exploratory"
'''


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """registry/cpu-grpo (a frozen control: learning rate 0) on three seeds, with an exploratory
    contrast: its dry-run report, and the same runs analyzed as a real study would be."""
    tmp = tmp_path_factory.mktemp("reports")
    text = (ROOT / "registry" / "cpu-grpo" / "plan.toml").read_text() + EXPLORATORY
    text = text.replace("seeds = { first = 0, last = 5 }", "seeds = { first = 0, last = 2 }").replace("n_problems = 64", "n_problems = 16")
    (tmp / "plan.toml").write_text(text)
    res = dry_run(tmp / "plan.toml", {"C1": 0.03}, n_resamples=50, progress=False)
    real = analyze_study(res.folder, n_resamples=50, progress=False)
    written = write_report(real, tmp / "real")
    return res, res.folder / "report", tmp / "real", written


def _tables(md: str) -> list[int]:
    """Line numbers where a markdown table starts."""
    lines = md.splitlines()
    return [i for i, ln in enumerate(lines) if ln.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))]


def test_a_dry_run_report_says_synthetic_on_its_title_every_table_and_file(reports):
    res, syn, _, _ = reports
    md = (syn / "report.md").read_text()
    lines = md.splitlines()
    assert lines[0].startswith("# SYNTHETIC — cpu-grpo") and "SYNTHETIC" in lines[2]
    starts = _tables(md)
    assert len(starts) >= 3  # contrasts, compute, dynamics
    for i in starts:
        caption = next(ln for ln in reversed(lines[:i]) if ln.strip())
        assert "SYNTHETIC" in caption, (i, lines[i])
    body = "\n".join(lines[3:])
    assert "**" not in body and "inconclusive" in body  # verdicts are printed, never bold
    assert "lock chain intact" not in md and "written by `prereg dry-run`" in md
    for csv in sorted(syn.glob("*.csv")):
        df = pd.read_csv(csv)
        assert "synthetic" in df.columns and df["synthetic"].all() and len(df), csv.name
    assert json.loads((syn / "results.json").read_text())["synthetic"] is True
    tex = (syn / "contrasts.tex").read_text()
    assert re.search(r"\\caption\{\\textbf\{SYNTHETIC\}", tex)
    page = (syn / "report.html").read_text()
    assert re.search(r"<title>SYNTHETIC — ", page) and 'class="synthetic"' in page
    console = Console(record=True, width=200)
    console.print(console_table(res.analysis))
    assert "SYNTHETIC" in console.export_text()


def test_a_real_report_says_synthetic_nowhere(reports):
    _, syn, real, written = reports
    assert {p.name for p in written} >= {"report.md", "report.html", "contrasts.tex", "contrasts.csv"}
    assert written[-1].name == "report.html"  # written last: it embeds what came before
    for p in written:
        if p.suffix in (".md", ".csv", ".json", ".tex", ".html"):
            assert "SYNTHETIC" not in p.read_text(), p.name
    assert "synthetic" not in pd.read_csv(real / "contrasts.csv").columns
    assert "synthetic" not in json.loads((real / "results.json").read_text())
    md = (real / "report.md").read_text()
    assert "lock chain intact" in md and ("**inconclusive**" in md or "**gain**" in md)
    # the real CSVs are the dry run's without the column: nothing else changed
    pd.testing.assert_frame_equal(pd.read_csv(syn / "per_seed.csv").drop(columns="synthetic"), pd.read_csv(real / "per_seed.csv"))


def test_the_synthetic_column_keeps_every_field_as_written(reports):
    """A dry run's CSVs are the real report's tables plus the mark: no field changed by it."""
    _, syn, real, _ = reports
    for name in ("contrasts", "per_seed", "configurations", "curves"):
        marked, plain = pd.read_csv(syn / f"{name}.csv"), pd.read_csv(real / f"{name}.csv")
        assert marked["synthetic"].tolist() == [True] * len(plain), name
        pd.testing.assert_frame_equal(marked.drop(columns="synthetic"), plain, check_exact=False, rtol=1e-9)


def test_durations_and_token_counts_read_in_units_that_fit(reports):
    assert [column_time_unit([s])[0] for s in (3.0, 119.0, 300.0, 9000.0)] == ["s", "s", "min", "h"]
    assert column_time_unit([float("nan"), 5.0]) == ("s", 1.0)
    assert [format_tokens(n) for n in (512, 30_000, 30_311.7, 1_200_000, 12_250_000)] == ["512", "30K", "30.31K", "1.2M", "12.25M"]
    md = (reports[1] / "report.md").read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| configuration | seeds | accuracy"))
    assert "training time to B (s)" in head and "hours" not in head and "tokens at B |" in head
    row = next(ln for ln in md.splitlines() if ln.startswith("| grpo | 3 |")).split(" | ")
    assert row[4].endswith("K") and float(row[6]) > 1  # about 30K tokens and 3 s, not 0.030 M and 0.001 h


def test_a_control_that_cannot_change_shows_no_collapse_flag(reports, tmp_path):
    md = (reports[1] / "report.md").read_text()
    assert "| frozen | 3 | " in md and "— (cannot change: learning rate 0)" in md.split("| frozen | 3 | ")[1].splitlines()[0]
    assert re.search(r"\| grpo \| 3 \| [0-9.]+ \| \d / 3 \(\d+%\) \|", md)  # a configuration that trains is counted
    assert "A seed has collapsed when its pass@4 at B is below its own evaluation 0" in md
    plan = load_plan(reports[0].folder / "plan.toml").plan
    assert cannot_change(plan, "frozen") == "learning rate 0" and cannot_change(plan, "grpo") is None
    # only the training learning rate freezes a policy: a warm start's rate of 0, a boolean or a
    # sectioned recipe's [update] table are told apart
    recipe = dict(plan.recipe)
    for over, frozen in (({"warm_start": {"learning_rate": 0.0}}, None), ({"learning_rate": False}, None),
                         ({"update": {"learning_rate": 0}}, "learning rate 0"), ({"update": {"learning_rate": 1e-6}}, None),
                         ({"learning_rate": 1e-9}, None)):
        p = plan.with_configurations({"x": {"overrides": over}}).model_copy(update={"recipe": recipe})
        assert cannot_change(p, "x") == frozen, over
    assert cannot_change(plan, "no-such-configuration") is None


def _row(**kw) -> dict:
    base = {"contrast": "C1", "tier": "primary", "kind": "superiority", "design": "paired", "comparison": "",
            "treatment": "t", "control": "c", "at": "B", "metric": "accuracy", "n": 5, "mean": -0.143,
            "ci_low": -0.160, "ci_high": -0.127, "p": 1e-5, "p_adjusted": 5e-5, "tost_p": 0.9, "tested_p": 1e-5,
            "status": "read", "target": float("nan")}
    return {**base, **kw}


def test_contrasts_tex_is_booktabs_in_blocks_and_escaped():
    df = pd.DataFrame([
        _row(treatment="mc_k4 & 50% #1", control="cost$_x", comparison="mc_k4 & 50% #1 − cost$_x"),
        _row(contrast="C2", tier="secondary", kind="equivalence", mean=-0.008, p_adjusted=float("nan"), tost_p=0.083),
        _row(contrast="C3", tier="exploratory", at="updates", p=2e-11, tost_p=float("nan")),
        _row(contrast="C4", tier="exploratory", status="not read", n=0)])
    tex = contrasts_tex(df, caption="S1 & friends: 100% of_it", label="s_1 contrasts", printed_test=printed_test,
                        is_target=is_target)
    lines = tex.splitlines()
    assert [ln for ln in lines if ln in (r"\toprule", r"\midrule", r"\bottomrule")] == [r"\toprule", r"\midrule", r"\bottomrule"]
    spec = next(ln for ln in lines if ln.startswith(r"\begin{tabular}"))
    assert spec == r"\begin{tabular}{lllrrll}"  # seven columns, no vertical rule
    body = lines[lines.index(r"\midrule") + 1:lines.index(r"\bottomrule")]
    rows = [ln for ln in body if ln.endswith(r"\\") and not ln.startswith(r"\multicolumn")]
    assert len(rows) == 4 and all(ln.count(" & ") == 6 for ln in rows)  # one row per contrast, 7 cells
    blocks = [ln for ln in body if ln.startswith(r"\multicolumn")]
    assert blocks == [r"\multicolumn{7}{l}{\textit{Primary contrasts}} \\", r"\multicolumn{7}{l}{\textit{Secondary contrasts}} \\",
                      r"\multicolumn{7}{l}{\textit{Exploratory contrasts}} \\"]
    assert r"mc\_k4 \& 50\% \#1 $-$ cost\$\_x" in rows[0] and r"S1 \& friends: 100\% of\_it" in tex
    assert r"Holm $p$ = $5\times10^{-5}$" in rows[0] and "$-0.143$" in rows[0] and "[$-0.160$, $-0.127$]" in rows[0]
    assert r"TOST $p$ = .083" in rows[1]
    assert rows[2].endswith(r"exploratory ($p$ = $<10^{-10}$; TOST $p$ = n/a) \\")
    assert "not read" in rows[3] and r"\label{tab:s-1-contrasts}" in tex
    # nothing special left unescaped in a cell: every & is a column separator
    for ln in rows:
        cleaned = ln.replace(" & ", " ")
        for escaped in (r"\&", r"\%", r"\#", r"\_"):
            cleaned = cleaned.replace(escaped, "")
        assert not re.search(r"[&%#_]", cleaned), ln
    assert tex_test("p = 3e-07") == "$p$ = $3\\times10^{-7}$"


def test_contrasts_tex_compiles(reports, tmp_path):
    tex = shutil.which("pdflatex")
    if tex is None:
        pytest.skip("pdflatex is not installed here (the structure of contrasts.tex is tested without it)")
    doc = ("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
           + (reports[1] / "contrasts.tex").read_text() + "\\end{document}\n")
    (tmp_path / "t.tex").write_text(doc)
    run = subprocess.run([tex, "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and (tmp_path / "t.pdf").exists(), run.stdout[-2000:]


def test_report_html_holds_no_script_link_or_address_even_when_the_plan_text_tries():
    md = ("# t\n\n[home](https://example.org) <https://example.org/a> <script>alert(1)</script>\n\n"
          '<img src="http://example.org/x.png">\n\n![remote](https://example.org/y.png)\n\n![here](fig.png)\n\n'
          "| a |\n|---|\n| 1 |\n")
    page = render_html(md, {"fig.png": b"\x89PNG"})
    assert "<script" not in page and "<img src=\"http" not in page and "href=" not in page
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page) and "@import" not in page and "url(" not in page
    assert page.count("<img ") == 1 and 'src="data:image/png;base64,iVBORw==' in page
    assert "[figure not embedded: https://example.org/y.png]" in page and "<table>" in page


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_html_renders_in_a_headless_browser_with_every_figure(reports, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium or chromium-browser on PATH (.ci/run installs chromium)")
    page = (reports[1] / "report.html").read_text()
    n_img, n_tables = page.count("<img "), page.count("<table>")
    assert n_img >= 3 and n_tables >= 3
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page) and "@import" not in page and "<script" not in page
    # a probe, on load, writes what the browser decoded; two images that must fail show it can see a failure:
    # a broken data URI, and an address the page's policy (and the resolver rules) must not reach
    probe = ("<img id=bad src=\"data:image/png;base64,AAAA\"><img id=far src=\"http://example.org/x.png\">"
             "<script>window.addEventListener('load', () => { const pre = document.createElement('pre'); pre.id = 'probe';"
             "pre.textContent = JSON.stringify({imgs: Array.from(document.images).map(i => [i.id, i.naturalWidth, i.complete]),"
             "tables: document.querySelectorAll('table').length, title: document.title}); document.body.appendChild(pre); });"
             "</script></body>")
    probed = page.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';").replace("</body>", probe)
    (tmp_path / "probe.html").write_text(probed, encoding="utf-8")
    run = subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--host-resolver-rules=MAP * ~NOTFOUND",
                          f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", (tmp_path / "probe.html").as_uri()],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r'<pre id="probe">(.*?)</pre>', run.stdout, re.S)
    assert m, (run.returncode, run.stderr[-2000:])
    seen = json.loads(html.unescape(m.group(1)))
    assert seen["title"].startswith("SYNTHETIC — ") and seen["tables"] == n_tables
    figures, controls = seen["imgs"][:-2], dict((i, w) for i, w, _ in seen["imgs"][-2:])
    assert len(figures) == n_img and all(w > 0 and done for _, w, done in figures), figures
    assert controls == {"bad": 0, "far": 0}


def test_non_inferiority_is_printed_against_the_lower_margin_of_an_asymmetric_margin():
    """A plan's ``margin = [-0.01, 0.03]``: the 90% lower bound is set against −0.01 (the bound the
    verdict uses), not against the upper margin mirrored (−0.03), which beside "not shown
    non-inferior" read as a contradiction."""
    from prereg_kit import stats

    row = _row(kind="non-inferiority", tier="secondary", mean=0.004, ci_low=-0.02, ci_high=0.028, ni_p=0.09,
               ni_lower=-0.015, margin_low=-0.01, margin_high=0.03)
    assert printed_test(pd.Series(row)).endswith("90% lower bound −0.015 vs −0.01")
    verdict = stats.verdict("non-inferiority", p=row["ni_p"], ci_low=row["ni_lower"], margin=-row["margin_low"], alpha=0.05)
    assert verdict.reading != "non-inferior" and row["ni_lower"] < row["margin_low"]  # the text and the verdict agree
    symmetric = _row(kind="non-inferiority", tier="secondary", ni_p=0.01, ni_lower=-0.015, margin_low=-0.02, margin_high=0.02)
    assert printed_test(pd.Series(symmetric)).endswith("90% lower bound −0.015 vs −0.02")
