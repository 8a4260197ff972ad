"""The report's figures as objects: drawn on a user's axes, units that fit the span, legends off
the data, SYNTHETIC on every figure of a dry run and on none of a real analysis, a PDF beside
every PNG, and nothing that keeps a written figure (global state: test_core_imports)."""

from __future__ import annotations

import dataclasses
import gc
import re
import weakref
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from paths import ROOT
from plans import plan_text

from prereg_kit.analysis.gradient import GradientResults
from prereg_kit.readings.extrapolation import Extrapolation
from prereg_kit.report import extrapolation_plots, plots, write_report
from prereg_kit.report import gradient as gradient_report
from prereg_kit.simulate.dryrun import dry_run

pytestmark = pytest.mark.figures  # reads the report's figures (tests/conftest.py)

FIGURES = ("forest", "accuracy", "difference_vs_time")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """A small dry run (SYNTHETIC) and the same analysis written as a real one, with every
    Figure the report writers saved, by file name."""
    d = tmp_path_factory.mktemp("plots")
    (d / "plan.toml").write_text(plan_text(id="figs", comparator="outcome", seeds="[0, 1, 2]", tokens=30000,
                                           configurations="[configurations.outcome]\n[configurations.critic_filter]\n",
                                           eval_every="B/4", n_problems=20, treatment="critic_filter"))
    figs: dict[str, dict] = {"dry": {}, "real": {}}
    save_all, into = plots.save_all, figs["dry"]

    def spy(fig, path, **kw):
        into[Path(path).stem] = fig
        return save_all(fig, path, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "save_all", spy)
        mp.setattr(extrapolation_plots, "save_all", spy)
        dry = dry_run(d / "plan.toml", {"C1": 0.05}, seed=3, progress=False, n_resamples=50)
        into = figs["real"]
        real = dataclasses.replace(dry.analysis, synthetic=False)
        written = write_report(real, d / "real")
    return dry, figs, written


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def _curves(tokens_end: float, seconds_end: float) -> pd.DataFrame:
    rows = [{"configuration": c, "seed": s, "eval_index": i, "tokens": tokens_end * i / 4,
             "train_seconds": seconds_end * i / 4, "accuracy": 0.3 + 0.05 * i + 0.02 * s + (0.03 if c == "t" else 0)}
            for c in ("c", "t") for s in range(3) for i in range(5)]
    return pd.DataFrame(rows)


def _contrasts(n: int = 4):
    c = pd.DataFrame({"contrast": [f"C{i}" for i in range(n)], "tier": ["primary"] * 2 + ["exploratory"] * (n - 2),
                      "treatment": "t", "control": "c", "at": "B", "mean": np.linspace(-0.03, 0.06, n)})
    c["ci_low"], c["ci_high"] = c["mean"] - 0.02, c["mean"] + 0.02
    seeds = pd.DataFrame([{"contrast": r.contrast, "seed": s, "difference": r.mean + 0.01 * (s - 1)}
                          for r in c.itertuples() for s in range(3)])
    return c, seeds


def _extrapolation() -> Extrapolation:
    pts = pd.DataFrame([{"seed": s, "eval_index": i, "tokens": 5000.0 * i, "observed": 0.3 + 0.04 * i,
                         "extrapolated": 0.3 + 0.03 * i if i <= 3 else np.nan, "control": 0.3 + 0.02 * i,
                         "usable": i <= 3} for s in range(2) for i in range(1, 6)])
    return Extrapolation(e=1.5, per_seed=pd.DataFrame(), points=pts, n_usable=3, last_usable=3, last_tokens=15000.0)


def _gradient(synthetic: bool) -> GradientResults:
    table = pd.DataFrame({"test": "G1", "configuration": ["a", "b"], "status": "measured", "per_token": [1.2, 0.9],
                          "per_token_ci_low": [1.0, 0.7], "per_token_ci_high": [1.4, 1.1]})
    conds = pd.DataFrame({"test": ["G1"], "configuration": ["a"], "metric": ["per_token"], "bound": [1.1],
                          "direction": [">"]})
    return GradientResults(table=table, fit=pd.DataFrame(), conditions=conds, synthetic=synthetic)


def test_every_figure_of_a_dry_run_says_synthetic_and_none_of_a_real_analysis(reports):
    _, figs, _ = reports
    assert set(figs["dry"]) == set(figs["real"]) == set(FIGURES)
    for name, fig in figs["dry"].items():
        titles = [fig._suptitle.get_text() if fig._suptitle else ""] + [ax.get_title() for ax in fig.axes]
        assert any(t.startswith(plots.SYNTHETIC) for t in titles), (name, titles)
        for ax in fig.axes:  # every panel carries the watermark
            assert "SYNTHETIC" in [t.get_text() for t in ax.texts], name
    for name, fig in figs["real"].items():
        assert not [t for t in _texts(fig) if "SYNTHETIC" in t], name


def test_extrapolation_and_gradient_figures_are_marked_when_synthetic():
    x = _extrapolation()
    assert any("SYNTHETIC" in t for t in _texts(extrapolation_plots.extrapolation(x, title="E1", synthetic=True)))
    assert not any("SYNTHETIC" in t for t in _texts(extrapolation_plots.extrapolation(x, title="E1")))
    # a dry run's gradient results say so even when the caller passes nothing
    assert any("SYNTHETIC" in t for t in _texts(gradient_report.efficiency(_gradient(True), title="g")))
    assert any("SYNTHETIC" in t for t in _texts(gradient_report.efficiency(_gradient(False), title="g", synthetic=True)))
    assert not any("SYNTHETIC" in t for t in _texts(gradient_report.efficiency(_gradient(False), title="g")))


def test_report_writes_a_pdf_beside_every_png(reports):
    dry, _, written = reports
    names = {p.name for p in written}
    for stem in FIGURES:
        assert {f"{stem}.png", f"{stem}.pdf"} <= names
        for folder in (dry.folder / "report", written[0].parent):
            assert (folder / f"{stem}.pdf").read_bytes()[:4] == b"%PDF"
            assert (folder / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
    assert "difference_vs_time.png" in (dry.folder / "report" / "report.md").read_text()
    assert not list((dry.folder / "report").glob("difference_vs_hours*"))


def test_writers_of_extrapolation_and_gradient_figures_write_png_and_pdf(tmp_path):
    paths = extrapolation_plots.extrapolation_figure(_extrapolation(), tmp_path / "extrapolated-E1.png", title="E1",
                                                     treatment="t", control="c")
    paths += gradient_report.efficiency_figure(_gradient(False), tmp_path / "gradient_tests.png", title="g")
    assert [p.name for p in paths] == ["extrapolated-E1.png", "extrapolated-E1.pdf", "gradient_tests.png",
                                       "gradient_tests.pdf"]
    assert all(p.read_bytes()[:4] in (b"%PDF", b"\x89PNG") for p in paths)
    # a written figure is kept by nothing once the caller drops it (no pyplot registry)
    fig = plots.accuracy(_curves(30000, 600))
    ref = weakref.ref(fig)
    plots.save_all(fig, tmp_path / "a.png")
    del fig
    gc.collect()
    assert ref() is None



def test_the_same_figure_gives_the_same_pdf_bytes_on_every_run(tmp_path):
    """A second `make figures` or `prereg analyze` writes the same files: the PDF carries no
    creation date (matplotlib writes the time of the save unless told not to)."""
    import time

    written = []
    for k in range(2):
        c, seeds = _contrasts(3)
        written.append([p.read_bytes() for p in plots.save_all(plots.forest(c, seeds), tmp_path / f"{k}" / "f.png")])
        if k == 0:
            time.sleep(1.1)  # the date has seconds: a second save in the same second would hide it
    assert written[0] == written[1] and b"/CreationDate" not in written[0][1]
    one = plots.save(plots.forest(*_contrasts(3)), tmp_path / "one.pdf")
    assert b"/CreationDate" not in one.read_bytes()

def test_figures_draw_on_the_users_axes_and_leave_the_figure_to_them():
    fig, axes = plots.subplots(2, 3, figsize=(14, 7))
    before = [ax.get_position().bounds for ax in axes.flat]
    c, seeds = _contrasts()
    curves = _curves(30000, 600)
    got = [plots.forest(c, seeds, ax=axes[0, 0], title="mine"),
           plots.accuracy(curves, x="tokens", ax=axes[0, 1], budget_tokens=30000),
           plots.accuracy(curves, x="time", ax=axes[0, 2]),
           plots.difference(curves, [("C1", "t", "c")], ax=axes[1, 0]),
           extrapolation_plots.extrapolation(_extrapolation(), ax=axes[1, 1]),
           gradient_report.efficiency(_gradient(False), ax=axes[1, 2])]
    assert all(g is fig for g in got)
    # not laid out, saved or closed: the positions are the user's and the figure still draws
    assert [ax.get_position().bounds for ax in axes.flat] == before and len(fig.axes) == 6
    assert fig.canvas.figure is fig and axes[0, 0].get_title() == "mine"
    assert not any("SYNTHETIC" in t for t in _texts(fig))
    # without ax each function makes a figure of its own
    own = plots.accuracy(curves)
    assert own is not fig and len(own.axes) == 1


def test_accuracy_refuses_an_unknown_axis():
    with pytest.raises(ValueError, match="'hours'.*'tokens' or 'time'"):
        plots.accuracy(_curves(30000, 600), x="hours")


@pytest.mark.parametrize(("seconds", "unit"), [(59, "seconds"), (119, "seconds"), (120, "minutes"),
                                               (3 * 3600 - 1, "hours"), (7199, "minutes"), (50 * 3600, "hours")])
def test_time_unit_fits_the_span(seconds, unit):
    assert plots.time_unit(seconds)[1] == unit


@pytest.mark.parametrize(("tokens", "unit", "div"), [(800, "tokens", 1), (1999, "tokens", 1), (30000, "thousands", 1e3),
                                                     (1_999_999, "thousands", 1e3), (5e6, "millions", 1e6)])
def test_token_unit_fits_the_span(tokens, unit, div):
    assert plots.token_unit(tokens) == (div, unit)


def test_axes_read_in_the_unit_of_their_span():
    curves = _curves(30000, 5400)  # 30 thousand tokens, 90 minutes
    tok = plots.accuracy(curves, x="tokens", budget_tokens=30000).axes[0]
    assert tok.get_xlabel() == "generated tokens (thousands)"
    assert max(max(line.get_xdata()) for line in tok.lines) == pytest.approx(30.0)  # never 0.000–0.030 million
    t = plots.accuracy(curves, x="time").axes[0]
    assert t.get_xlabel() == "training time (minutes)" and max(t.lines[0].get_xdata()) == pytest.approx(90.0)
    d = plots.difference(_curves(3e6, 8 * 3600), [("C1", "t", "c")]).axes[0]
    assert d.get_xlabel() == "matched training time (hours)" and max(d.lines[-1].get_xdata()) == pytest.approx(8.0)
    m = plots.accuracy(_curves(3e6, 10), x="tokens").axes[0]
    assert m.get_xlabel() == "generated tokens (millions)" and max(m.lines[0].get_xdata()) == pytest.approx(3.0)
    e = extrapolation_plots.extrapolation(_extrapolation(), treatment="t").axes[0]
    assert e.get_xlabel() == "t's generated tokens t (thousands)"


def _overlaps(fig) -> list:
    """Data points of the figure's first axes (display coordinates) inside its legend's box."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    ax = fig.axes[0]
    box = ax.get_legend().get_window_extent()
    pts = [ax.transData.transform(np.asarray(col.get_offsets())) for col in ax.collections if len(col.get_offsets())]
    pts += [ax.transData.transform(np.column_stack([ln.get_xdata(), ln.get_ydata()])) for ln in ax.lines]
    xy = np.vstack([p for p in pts if p.size])
    return [p for p in xy if box.x0 <= p[0] <= box.x1 and box.y0 <= p[1] <= box.y1]


def test_forest_legend_covers_no_data_point():
    c, seeds = _contrasts(6)
    fig = plots.forest(c, seeds, title="t")
    fig.tight_layout()
    assert not _overlaps(fig)
    # the check sees an overlap when there is one: the same legend over the middle of the panel
    ax = fig.axes[0]
    ax.legend(handles=ax.get_legend().legend_handles, loc="center", fontsize=20)
    assert _overlaps(fig)



def _bands(ax) -> list[tuple[float, float, float, float]]:
    """The grey margin bands of a forest plot as (x0, x1, y0, y1) in data coordinates, bottom up."""
    out = []
    for art in [*ax.patches, *ax.collections]:
        face = np.ravel(art.get_facecolor())
        if face.size < 3 or not np.allclose(face[:3], [0xd9 / 255] * 3):
            continue
        paths = art.get_paths() if hasattr(art, "get_paths") else [art.get_path().transformed(art.get_patch_transform())]
        for p in paths:
            v = p.vertices
            out.append((v[:, 0].min(), v[:, 0].max(), v[:, 1].min(), v[:, 1].max()))
    return sorted(out, key=lambda b: b[2])


def test_forest_draws_each_contrasts_own_margin_where_the_margins_differ():
    """An asymmetric margin ([-0.01, 0.03]) beside a symmetric one (±0.02): each row's band is its
    own bounds, not one ±max band across the panel; contrasts that share one margin keep one band."""
    c, seeds = _contrasts(2)
    c["margin_low"], c["margin_high"] = [-0.01, -0.02], [0.03, 0.02]
    ax = plots.forest(c, seeds, margin=0.03).axes[0]
    bands = _bands(ax)
    assert [b[:2] for b in bands] == [(-0.02, 0.02), (-0.01, 0.03)]  # bottom row is the second contrast
    assert bands[0][3] < bands[1][2]  # one band per row, not across the panel
    assert "the contrast's own margin" in [t.get_text() for t in ax.get_legend().get_texts()]
    c["margin_low"], c["margin_high"] = -0.02, 0.02
    ax = plots.forest(c, seeds, margin=0.02).axes[0]
    assert [b[:2] for b in _bands(ax)] == [(-0.02, 0.02)]
    assert "±0.02 margin" in [t.get_text() for t in ax.get_legend().get_texts()]

def test_the_figures_example_in_the_docs_runs(reports, tmp_path, monkeypatch):
    text = (ROOT / "docs" / "analysis.md").read_text()
    block = re.search(r"### Figures\n.*?```python\n(.*?)```", text, flags=re.DOTALL).group(1)
    monkeypatch.chdir(tmp_path)
    ns = {"a": reports[0].analysis}
    exec(compile(block, "docs/analysis.md", "exec"), ns)  # the docs' own example
    assert (tmp_path / "figure.pdf").read_bytes()[:4] == b"%PDF"
    from figcheck import layout_problems

    assert layout_problems(ns["fig"]) == []  # the forest's legend lies over no panel, no label is cut


def test_the_layout_check_sees_a_legend_over_data_and_text_outside_the_figure():
    from figcheck import layout_problems

    fig, axes = plots.subplots(1, 2, figsize=(8, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a line")
    fig.tight_layout()
    assert layout_problems(fig) == []
    axes[0].legend(loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside its own panel, over the neighbour's
    assert any("over the data area of axes 1" in p for p in layout_problems(fig))
    axes[0].legend(loc="center")
    assert any("over the data area of axes 0" in p for p in layout_problems(fig))
    axes[0].get_legend().remove()
    axes[0].set_ylabel("a label long enough to leave the figure " * 3)
    assert any("outside the figure" in p for p in layout_problems(fig))


def test_every_report_figure_keeps_its_legends_off_the_data_of_every_panel(reports, tmp_path):
    """Every band, line and marker has an entry, and no legend lies over any panel's data area
    (the report's own figures, the extrapolation, the gradient tests and the performance profile)."""
    from figcheck import layout_problems

    from prereg_kit.report.aggregate_plots import draw_performance_profile
    from prereg_kit.stats import performance_profile

    _, figs, _ = reports
    more = {"extrapolation": extrapolation_plots.extrapolation(_extrapolation(), title="E1"),
            "gradient": gradient_report.efficiency(_gradient(False), title="g")}
    rng = np.random.default_rng(0)
    profiles = {n: performance_profile(rng.normal(mu, 0.15, (6, 3)), np.linspace(0, 1, 11), n_resamples=50, seed=1)
                for n, mu in (("dense", 0.6), ("outcome", 0.5))}
    more["profile"] = draw_performance_profile(profiles, title="CPU study")[0]
    for fig in more.values():
        plots.layout(fig)
    for name, fig in {**figs["real"], **figs["dry"], **more}.items():
        assert layout_problems(fig) == [], name
    labels = {name: [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
              for name, fig in {**figs["real"], **more}.items()}
    assert "band: min–max over seeds" in labels["accuracy"] and "B: where the table reads" in labels["accuracy"]
    assert "C1: 95% t band" in labels["difference_vs_time"]
    assert "band: 95% stratified bootstrap" in labels["profile"]
    assert "one seed's difference" in labels["forest"] and "primary: mean, 95% CI" in labels["forest"]


def test_the_difference_figure_draws_each_contrasts_own_margin_where_the_margins_differ():
    """Two contrasts on one panel, [-0.01, 0.03] and ±0.02: each its own dashed bounds in its colour
    and legend line, no grey band of the largest; one shared margin keeps one band, named as it is."""
    curves = _curves(30_000, 600)
    pairs = [("C1", "t", "c"), ("C2", "t", "c")]
    panel = plots.DifferencePanel("tokens", pairs, margins={"C1": (-0.01, 0.03), "C2": (-0.02, 0.02)})
    ax = plots.subplots()[1]
    plots._draw_difference(ax, curves, panel, 0.03, 20)
    assert _bands(ax) == []
    dashed = sorted(round(float(ln.get_ydata()[0]), 3) for ln in ax.lines if ln.get_linestyle() == "--")
    assert dashed == [-0.02, -0.01, 0.02, 0.03]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "C1: its margin [-0.01, 0.03]" in legend and "C2: its margin [-0.02, 0.02]" in legend
    same = plots.DifferencePanel("tokens", pairs, margins={"C1": (-0.01, 0.03), "C2": (-0.01, 0.03)})
    ax = plots.subplots()[1]
    plots._draw_difference(ax, curves, same, 0.03, 20)
    assert [b[2:] for b in _bands(ax)] == [(-0.01, 0.03)]
    assert "margin [-0.01, 0.03]" in [t.get_text() for t in ax.get_legend().get_texts()]
    ax = plots.subplots()[1]  # no margins named: ±margin, as before
    plots._draw_difference(ax, curves, plots.DifferencePanel("tokens", pairs), 0.02, 20)
    assert [b[2:] for b in _bands(ax)] == [(-0.02, 0.02)]
    assert "±0.02 margin" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_difference_figure_reads_where_the_table_reads(reports):
    """C1 is read at B (matched generated tokens): the figure's axis is matched tokens, its curve
    ends at B, and the table's Δ and 95% CI are drawn there (the figure of a time reading ended
    elsewhere and showed a Δ the table did not read)."""
    _, figs, written = reports
    row = pd.read_csv(written[0].parent / "contrasts.csv").set_index("contrast").loc["C1"]
    (ax,) = figs["real"]["difference_vs_time"].axes
    assert ax.get_xlabel() == "matched generated tokens (thousands)"
    curve = next(ln for ln in ax.lines if ln.get_label().startswith("C1: critic_filter − outcome"))
    assert curve.get_xdata()[-1] == pytest.approx(30.0)  # B = 30K tokens
    (mark,) = [ln for ln in ax.lines if ln.get_marker() == "D"]
    assert mark.get_xdata()[0] == pytest.approx(30.0) and mark.get_ydata()[0] == pytest.approx(row["mean"])
    from matplotlib.collections import LineCollection

    (bar,) = [c.get_segments()[0] for c in ax.collections if isinstance(c, LineCollection)]  # the interval
    assert sorted(bar[:, 1]) == pytest.approx(sorted([row["ci_low"], row["ci_high"]]))
    assert "C1 in the table (tokens at B)" in " ".join(t.get_text() for t in ax.get_legend().get_texts())
