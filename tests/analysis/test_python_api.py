"""The notebook API: `import prereg_kit as pk` stays cheap, pk.analyze returns the documented
tables, pk.load_report reads a written report back as the analysis held it (and refuses what is
not a report, naming the path), and the walkthrough in docs/python-api.md runs as printed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from paths import ROOT

import prereg_kit as pk
from prereg_kit.analysis.notebook import SUMMARY_COLUMNS

DOC = ROOT / "docs" / "python-api.md"
TABLES = ("contrasts", "per_seed", "hypotheses", "configurations", "exclusions", "checks", "check_seeds", "curves")


def _python(code: str, timeout: int = 300) -> str:
    """Run ``code`` in a fresh interpreter with this worktree first on the path; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _doc_blocks() -> list[tuple[str, str | None]]:
    """(code, its printed output or None) for every ```python block of docs/python-api.md; the
    output is the ```text block right after it."""
    found = re.findall(r"```python\n(.*?)```\s*(?:```text\n(.*?)```)?", DOC.read_text(), flags=re.S)
    return [(code, out or None) for code, out in found]


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """The walkthrough of docs/python-api.md run block by block in one namespace, in an empty
    folder: (blocks, what each printed or None when skipped, the namespace, the folder, whether
    pyplot was loaded before the figure block). The other tests use its study and analysis."""
    folder = tmp_path_factory.mktemp("walkthrough")
    blocks, outputs, ns = _doc_blocks(), [], {}
    pyplot_before, pyplot_mid = "matplotlib.pyplot" in sys.modules, None
    here = os.getcwd()
    os.chdir(folder)
    try:
        for code, _ in blocks:
            if "pk.plots.forest" in code:
                pyplot_mid = "matplotlib.pyplot" in sys.modules
                if not hasattr(ns["pk"].plots, "forest"):  # the figure functions taking ax= are not merged yet
                    outputs.append(None)
                    continue
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(code, str(DOC), "exec"), ns)
            outputs.append(buf.getvalue())
    finally:
        os.chdir(here)
        if "fig" in ns:
            import matplotlib.pyplot as plt
            from figcheck import layout_problems

            ns["layout_problems"] = layout_problems(ns["fig"])  # as the reader sees it: legends, cut labels
            plt.close(ns["fig"])  # leave pyplot as the other tests found it
    return blocks, outputs, ns, folder, pyplot_before or not pyplot_mid


@pytest.fixture(scope="module")
def dry(walk):
    """The walkthrough's synthetic study (a DryRun) and its analysis by pk.analyze."""
    ns = walk[2]
    return ns["dr"], ns["a"]


def test_import_is_lazy_and_cheap():
    """`import prereg_kit` loads neither pandas, matplotlib, numpy nor torch and costs a small
    share of `import pandas` (a ratio of two imports in one fresh interpreter, not seconds);
    reading a name loads what that name needs, and only then."""
    out = _python("import sys, time\n"
                  "heavy = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'matplotlib', 'torch', 'numpy'))\n"
                  "t = time.perf_counter()\nimport prereg_kit as pk\nours = time.perf_counter() - t\nprint(heavy())\n"
                  "pk.stats.paired_t\nprint('pandas' in sys.modules, 'matplotlib' in sys.modules)\n"
                  "t = time.perf_counter()\nimport pandas\nprint(ours, time.perf_counter() - t)\n").splitlines()
    assert out[0] == "[]" and out[1] == "False False", out
    ours, theirs = map(float, out[2].split())
    assert ours < 0.2 * theirs, (ours, theirs)


def test_the_package_names_are_the_documented_ones():
    import prereg_kit.analysis.analyze as analyze_module  # the module every import names is what pk.analyze calls

    assert pk.analyze is analyze_module and callable(pk.analyze) and callable(pk.verify)
    assert pk.PreregError.__name__ == "PreregError" and pk.plots.__name__ == "prereg_kit.report.plots"
    assert {"analyze", "load_report", "write_report", "dry_run", "verify", "load_plan", "stats", "plots",
            "PreregError"} <= set(dir(pk))
    with pytest.raises(AttributeError, match="has no attribute 'analyse'"):
        pk.analyse  # noqa: B018 (a misspelling is not a silent None)


def test_analyze_returns_the_documented_tables(dry):
    _, a = dry
    assert isinstance(a, pk.Analysis) and not a.synthetic
    for name, cols in {"contrasts": ["contrast", "tier", "kind", "treatment", "control", "at", "n", "mean", "ci_low",
                                     "ci_high", "p", "tested_p", "p_adjusted", "tost_p", "verdict", "claim"],
                       "per_seed": ["contrast", "seed", "treatment_value", "control_value", "difference", "read_at"],
                       "configurations": ["configuration", "n_seeds", "accuracy_at_B", "tokens_at_B", "hours_at_B"],
                       "curves": ["configuration", "seed", "eval_index", "tokens", "train_seconds", "accuracy"],
                       "exclusions": ["configuration", "seed", "what", "reason"]}.items():
        df = getattr(a, name)
        assert isinstance(df, pd.DataFrame) and set(cols) <= set(df.columns), (name, df.columns)
    s = a.summary()
    assert list(s.columns) == list(SUMMARY_COLUMNS) and list(s["id"]) == ["C1", "C2"]
    assert s.loc[0, "p_adj"] == a.contrasts.loc[0, "p_adjusted"] and s.loc[1, "p"] == a.contrasts.loc[1, "tested_p"]
    assert set(s["verdict"]) <= {"gain", "deficit", "inconclusive", "non-inferior", "not shown non-inferior"}
    text, page = repr(a), a._repr_html_()
    assert text.startswith("<Analysis of example:") and len(text.splitlines()) < 8  # a summary, not a dump
    assert "<table" in page and "C2" in page and "SYNTHETIC" not in page


def test_a_dry_run_is_marked_synthetic_in_its_display(dry):
    dr, _ = dry
    assert dr.analysis.synthetic and "[SYNTHETIC]" in repr(dr.analysis) and "[SYNTHETIC]" in dr.analysis._repr_html_()


def _same(x: pd.DataFrame, y: pd.DataFrame) -> None:
    """Equal tables up to dtype, None and NaN alike."""
    def norm(d: pd.DataFrame) -> pd.DataFrame:
        d = d.reset_index(drop=True)
        return d.astype(object).where(d.notna(), np.nan)

    pd.testing.assert_frame_equal(norm(x), norm(y), check_dtype=False, check_index_type=False)


def test_a_written_report_loads_back_as_the_analysis(walk):
    """The dry run's analysis, written by write_report, reads back with equal tables, from the
    study folder, the report folder or its results.json."""
    dr, folder = walk[2]["dr"], walk[3] / walk[2]["dr"].folder
    a = dr.analysis
    for where in (folder, folder / "report", folder / "report" / "results.json"):
        r = pk.load_report(where)
        assert r.folder == folder / "report"
        for name in TABLES:
            _same(getattr(a, name), getattr(r, name))
        record = json.loads((r.folder / "results.json").read_text())
        assert (r.study, r.plan_hash, r.exploratory) == ("example", a.plan_hash, False)
        assert r.synthetic is bool(record.get("synthetic", False))
        assert r.lock == json.loads(json.dumps(a.lock_summary)) and r.notes == a.notes + a.devices.notes
    _same(r.summary(), a.summary())
    assert repr(r).startswith("<Report of example:")


def test_an_empty_table_keeps_its_columns(walk, tmp_path):
    """results.json keeps no header: an empty table reads its columns from the CSV beside it, or
    the ones the analysis gives it."""
    src = walk[3] / walk[2]["dr"].folder / "report"
    record = json.loads((src / "results.json").read_text())
    record["per_seed"], record["checks"] = [], []
    (tmp_path / "results.json").write_text(json.dumps(record))
    (tmp_path / "per_seed.csv").write_text((src / "per_seed.csv").read_text())
    r = pk.load_report(tmp_path)
    assert list(r.per_seed.columns) == list(walk[2]["a"].per_seed.columns) and not len(r.per_seed)
    assert list(r.checks.columns) == list(walk[2]["a"].checks.columns) and r.curves.empty  # no curves.csv here


def test_load_report_refuses_what_is_not_a_report(tmp_path):
    with pytest.raises(pk.PreregError, match=f"^{re.escape(str(tmp_path / 'nope'))}: no such folder$"):
        pk.load_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(pk.PreregError, match=r"empty: no results.json in this folder or in its report/"):
        pk.load_report(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.json").write_text('{"format": "prereg-results/1", "study": ')
    with pytest.raises(pk.PreregError, match=r"bad/results.json: not valid JSON \(line 1: Expecting value\)"):
        pk.load_report(bad)
    (bad / "results.json").write_text('{"format": "prereg-results/9", "study": "x"}')
    with pytest.raises(pk.PreregError, match=r"bad/results.json: format 'prereg-results/9' is not one this version reads"):
        pk.load_report(bad)
    (bad / "results.json").write_text('[1, 2]')
    with pytest.raises(pk.PreregError, match=r"format None is not one"):
        pk.load_report(bad)
    (bad / "results.json").write_text('{"format": "prereg-results/1", "study": "x"}')
    with pytest.raises(pk.PreregError, match=r"bad/results.json: no contrasts, per_seed, configurations in the record"):
        pk.load_report(bad)
    (bad / "results.json").write_text('{"format": "prereg-results/1", "study": "x", "contrasts": 3, "per_seed": [], '
                                      '"configurations": []}')
    with pytest.raises(pk.PreregError, match=r"'contrasts' is not a list of records"):
        pk.load_report(bad)
    (bad / "results.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(pk.PreregError, match=r"bad/results.json: not UTF-8 text"):
        pk.load_report(bad)
    with pytest.raises(pk.PreregError, match="no such folder"):
        pk.analyze(tmp_path / "nope")  # pk.analyze and pk.verify refuse as the commands do
    with pytest.raises(pk.PreregError, match=f"^{re.escape(str(tmp_path / 'empty'))}: no plan.toml in this folder"):
        pk.analyze(tmp_path / "empty")
    with pytest.raises(pk.PreregError, match="empty: no plan.toml in this folder"):
        pk.verify(tmp_path / "empty")


# --- docs/python-api.md: every ```python block ran, in order, in one namespace -------------------

def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z_\-@.]*[A-Za-z_]", text))


def test_the_python_api_walkthrough_runs_as_printed(walk):
    blocks, outputs, _, folder, no_pyplot = walk
    assert len(blocks) >= 6 and sum(out is not None for _, out in blocks) >= 5
    for (code, expected), got in zip(blocks, outputs):
        if got is not None and expected is not None:  # loosely: every word the doc shows (columns, verdicts)
            missing = _words(expected) - _words(got)
            assert not missing, f"{code}\nprinted:\n{got}\nmissing: {sorted(missing)}"
    assert no_pyplot, "pk.analyze, write_report or load_report loaded matplotlib.pyplot"
    figure = [i for i, (code, _) in enumerate(blocks) if "pk.plots.forest" in code]
    assert figure, "the walkthrough draws onto the user's own axes"
    if outputs[figure[0]] is not None:
        assert (folder / "my-figure.pdf").stat().st_size > 1000


def test_the_walkthrough_figure_has_no_legend_over_a_panel_and_no_label_cut(walk):
    """The notebook figure of the walkthrough (forest plot and accuracy side by side): no legend
    lies over either panel's data area and nothing is drawn outside the figure."""
    ns = walk[2]
    assert "fig" in ns and ns["layout_problems"] == []


def test_write_report_writes_into_the_study_report_folder_by_default(walk, monkeypatch):
    from prereg_kit import api

    seen = []
    monkeypatch.setattr(api, "_write_report", lambda a, out: seen.append(out) or [out])
    a = walk[2]["a"]
    pk.write_report(a)
    pk.write_report(a, "elsewhere")
    assert seen == [a.plan_path.parent / "report", Path("elsewhere")]
