"""The report's figure files as written: each PNG pixel for pixel what ``tight_layout`` and
``savefig(bbox_inches="tight")`` write (the plain way, which draws twice per file), of the pixel
size and look of a reference rendered by that plain way, and a PDF page the size of the plain
way's (within its padding), so nothing is cut off."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.collections import PathCollection
from PIL import Image
import pytest

from prereg_kit import extrapolation_plots, gradient_report, plots
from prereg_kit.gradient_tests import GradientResults
from prereg_kit.readings.extrapolation import Extrapolation

THUMB = (48, 16)  # width, height of the grey thumbnail a reference keeps
# rendered by the plain way (tight_layout, then savefig(bbox_inches="tight") per file) at dpi 120:
# the PNG's pixel size and a BOX-filtered grey thumbnail, one hex byte per pixel, row by row
REFERENCE = {
    "forest": ((1123, 461),
        "ffffffffffffffffffffffffffffffedd9dee5d7d8dfdad0dad5e6f2dadadcf6ffffffffffffffffffffffffffffffff"
        "fffffffffff3f3f3f3f3f3f3f3f3efe3e3e1e3dae3e3e3e3e9f3f3f3f3f3f3f3f3f3f3f3f3f3f3f3eafbe0efe8eefdfc"
        "f2ecedf2dee1fff0ece7ebecd6ece3d7d7dde8dae8e8e8e8f0fffffffffefffffffffefffffffffef2faecf3e4e7effc"
        "fffffffffff0fffffffefffffffff7e8e8e6e8dae8e8e8e8f0fffffffffefffffffffefffffffffef2f8eeeed6f0ebf7"
        "f6f7f0f7eae5fffffffefffffbece7d3d8c9d4cbd5d8d5e8f0fffffffffefffffffffefffffffffef2fbfafaf9faf7fc"
        "fbfafcfbf5edfffffffefffffffff9e8e8e5e8dae8e8e8e8f0fffffffffefffffffffefffffffffef2fdffffffffffff"
        "fbfbfefff9edfffffffefffffffff9e8e8e8e8dae8e8e8e2f0fafffffefefffffffffefffffffffef2fdffffffffffff"
        "f6f3eff3e6e5fffffffefffffffff9e8e8e8e2d2dddeded6e5f2f3f3f4fefffffffffefffffffffef2fdffffffffffff"
        "fffffffffff0fffffffefffffffff9e8e8e8e8dae8e8e8e8f0fffffffffefffffffffefffffffffef2fdffffffffffff"
        "f2f0eef3e0e2fffffffefffffffff9e8e8e8e8dae8e8e8e8e4f3edf3e8eaf3edf3edfdfffffffffef2fdffffffffffff"
        "fffffffffff0fffffffefffffffff9e8e8e8e8dae8e8e8e8f0fffffffffefffffffffefffffffffef2fdffffffffffff"
        "f2eeeef3e0e2fffffffefffffffff9e8e8e8e8dae8e8e8e8f0fffffffff6f3f1eff3e6f3f0f2f3f4f2fdffffffffffff"
        "ffffffffffeff3f3f3f2f3f3f3f3eddedededed1dedededee5f3f3f3f3f2f3f3f3f3f2f3f3f3f3f2e7fdffffffffffff"
        "fffffffffffffffffce5dffffffbe7e1fffffbdfeffffff8e2f1fffff6e2f2fffff4def7ffffefe1f8ffffffffffffff"
        "fffffffffffffffffffffffffffff9dbe3e7e7ebe8e2e8dfe3e1ece3edece5e2ffffffffffffffffffffffffffffffff"
        "fffffffffffffffffffffffffffffffffffce4e6e6e9e2eaede1eee2e5ffffffffffffffffffffffffffffffffffffff"),
    "accuracy": ((1425, 523),
        "ffffffffffffffffffffffffffffffffffffffffffffefe1dceeffffffffffffffffffffffffffffffffffffffffffff"
        "fffffffffffffffffbf5f2f4f5f5f2f3f5fffffffffffffffffffffffffffff5f5f3f5f4feffffffffffffffffffffff"
        "fffff8f4f5f5f4f5efe9e8e7e5e5e7e8e7f5f4f5f5f0f1f5f4f5f5f5f4f5f4e6eae7e8e8f3f5f5f5f4f5f5f2eaeaf2fd"
        "ffede6fdfefefdfefefdfefefdfefefdfefefdfdf8e5f3f2fdfefefefdfefefefdfefefefdfefefefbf5f0f1eaedeff4"
        "fffff4fefffffefffffefffffefffffefffdf5e9e3daf4f4fefffffffefffffffefffffffefffbf2e6e1ecf1fee9f7fd"
        "f9ede5fdfefefdfefefdfefefdfefef9f1e5e0dcd9daf3f2fdfefefefdfefefefdfefefdf7ede4e1d8daedf1fdf6f4fc"
        "e4fff4fefffffefffffefffffdf9ede5e1d6dae8f7f6f4f4fefffffffefffffffefdf7e9e3dfd6dceefafff3ffffffff"
        "e5ece6fdfefefdfefefdfcf6e6e2dfd7dceff9fefef5f3f2fdfefefefdfefefaf0e5e0dcd9e0f3fcfdfefef3ffffffff"
        "e9fff4fefffffefffbf1e7e1dad9e1f2fdfffefffff7f4f4fefffffffef9eee6e1d7dbe7f6fffffffefffff3ffffffff"
        "e6ece4fdfefef7ede4e0d9dae6f6fdfdfefefdfefef5f3f2fdfefcf6e8e2e0d8dbedf9fefdfefefefdfefef3ffffffff"
        "edfff4fdf7eae3e0d6dceffafefffffefffffefffff6f4f4fbf3e8e1dcd8e0f3fcfffffffefffffffefffff3ffffffff"
        "ffeee5f6e0ddd8e0f2fbfefefdfefefdfefefdfefef6f3f2ede0d9dae5f5fdfefdfefefefdfefefefdfefef3ffffffff"
        "fffff4f2dbe6f5fefffefffffefffffefffffefffff6f4f4e7dcedf9fefffffffefffffffefffffffefffff3ffffffff"
        "ffeee3fbf9fefdfefefdfefefdfefefdfefefdfefef5f3f2f8fbfefefdfefefefdfefefefdfefefefdfefef3ffffffff"
        "fffffde2eef4e3eef4e6eef4e8edf4e6ecf4e8ecf4e8ebfae7f4f4f4def4f4f4ddf4f4f4dbf4f4f4daf4f4f9ffffffff"
        "fffffffffffffffffbe6e4eae3ebe8e4eeffffffffffffffffffffffffffeae6e8e9e9e9e9ffffffffffffffffffffff"),
    "difference": ((1062, 491),
        "fffffffffffffffffffffffffffffffffffffff9d5d3d8e1dcffffffffffffffffffffffffffffffffffffffffffffff"
        "ffffeee4e9f2e6e7e7e7e7e7e7e5e7e7e7e7e7e7e5e7e7e7e7e7e7e6e7e7e7e7e7e7e7e6e7e7eaf2edf2f3f0f4edebf6"
        "ffffffffeffffdfffffffffffffdfffffffffffffdfffffffffffffefffffffffffffffeffffffffeffdfdfdfdfdfdfe"
        "ebf5fbf7effffdfffffffffffffdfffffffffffffdfffffffffffffefffffffffffffffeffffffffefffffffffffffff"
        "e6f3f2ebe2e9e8e9e9e9e9e9e9e8e9e9e9e9e9e9e8e9e9e9e9e9e9e8e9e9e9e9e9e9e9e8e9e9e9e9ebffffffffffffff"
        "e8f7ffffe4e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e8e7e8e8e8e8ebffffffffffffff"
        "e9f0eee6e1e7e6e7e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7e7e7e7e7e6e7e7e7e7ebffffffffffffff"
        "edf3ffffe4e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e8e7e8e8e8e8ebffffffffffffff"
        "e9f5eee1dcdddcdddddddddddddcdddddddddddddcdddddddddddddcdddddddddddddddcdddddddde9ffffffffffffff"
        "edf6ffffe4e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e8e7e8e8e8e8ebffffffffffffff"
        "e3f4f8f4e4e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e8e7e8e8e8e8ebffffffffffffff"
        "dff0f2f0e1e7e6e7e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7e7e7e7e7e6e7e7e7e7ebffffffffffffff"
        "ffffffffe4e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e8e8e7e8e8e8e8ebffffffffffffff"
        "fffaebe4e4ece9ecececececece9ecececececece9ececececececeaececececececebeaececececedffffffffffffff"
        "fffffffffff9f3fffffffffffbe4ffffffffffffdeffffffffffffe5f7ffffffffffedeeffffffffffffffffffffffff"
        "fffffffffffffffffffffffffffffffffff8e9e3e8e5ebe9e6e5e9ffffffffffffffffffffffffffffffffffffffffff"),
}
SIZE_SLACK = 3  # pixels: a different FreeType build may move text by a pixel or two
THUMB_SLACK = 16  # grey levels (0–255) in any thumbnail pixel (~23×29 PNG pixels): a text moved by a pixel stays under it


def _contrasts(n: int = 5):
    c = pd.DataFrame({"contrast": [f"C{i}" for i in range(n)], "tier": ["primary"] * 2 + ["exploratory"] * (n - 2),
                      "treatment": "t", "control": "c", "at": "B", "mean": np.linspace(-0.03, 0.06, n)})
    c["ci_low"], c["ci_high"] = c["mean"] - 0.02, c["mean"] + 0.02
    seeds = pd.DataFrame([{"contrast": r.contrast, "seed": s, "difference": r.mean + 0.01 * (s - 1)}
                          for r in c.itertuples() for s in range(4)])
    return c, seeds


def _curves() -> pd.DataFrame:
    rows = [{"configuration": c, "seed": s, "eval_index": i, "tokens": 3e6 * i / 4, "train_seconds": 5400 * i / 4,
             "accuracy": 0.3 + 0.05 * i + 0.02 * s + (0.03 if c == "t" else 0)}
            for c in ("c", "t") for s in range(3) for i in range(5)]
    return pd.DataFrame(rows)


def _extrapolation() -> Extrapolation:
    pts = pd.DataFrame([{"seed": s, "eval_index": i, "tokens": 5000.0 * i, "observed": 0.3 + 0.04 * i,
                         "extrapolated": 0.3 + 0.03 * i if i <= 3 else np.nan, "control": 0.3 + 0.02 * i,
                         "usable": i <= 3} for s in range(2) for i in range(1, 6)])
    return Extrapolation(e=1.5, per_seed=pd.DataFrame(), points=pts, n_usable=3, last_usable=3, last_tokens=15000.0)


def _gradient() -> GradientResults:
    table = pd.DataFrame({"test": "G1", "configuration": ["a", "b"], "status": "measured", "per_token": [1.2, 0.9],
                          "per_token_ci_low": [1.0, 0.7], "per_token_ci_high": [1.4, 1.1]})
    conds = pd.DataFrame({"test": ["G1"], "configuration": ["a"], "metric": ["per_token"], "bound": [1.1],
                          "direction": [">"]})
    return GradientResults(table=table, fit=pd.DataFrame(), conditions=conds, synthetic=False)


def _write(kind: str, path: Path, *, synthetic: bool = False) -> list[Path]:
    """The report's figure ``kind`` of fixed data, written as the report writes it."""
    if kind == "extrapolation":
        return extrapolation_plots.extrapolation_figure(_extrapolation(), path, title="E1", treatment="t", control="c",
                                                        synthetic=synthetic)
    if kind == "gradient":
        return gradient_report.efficiency_figure(_gradient(), path, title="gradient tests", synthetic=synthetic)
    if kind == "forest":
        return plots.forest_plot(*_contrasts(), path, title="every contrast (treatment − control)", synthetic=synthetic)
    if kind == "accuracy":
        return plots.accuracy_curves(_curves(), path, title="accuracy", budget_tokens=3_000_000, synthetic=synthetic)
    return plots.difference_over_time(_curves(), [("C1", "t", "c")], path, title="differences", synthetic=synthetic)


def _plain(fig, path, *, dpi=120, rect=None):
    """The plain way: lay out, then let each savefig draw once more to find the tight box."""
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    fig.savefig(Path(path).with_suffix(".pdf"), bbox_inches="tight")
    return [Path(path), Path(path).with_suffix(".pdf")]


def _untight(fig, path, *, dpi=120, rect=None):
    """Laid out, but saved whole: what the tight box is there to prevent (margins, or text cut)."""
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi)
    fig.savefig(Path(path).with_suffix(".pdf"))
    return [Path(path), Path(path).with_suffix(".pdf")]


def _written_by(saver, kind: str, path: Path, synthetic: bool = False) -> list[Path]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "save_all", saver)
        mp.setattr(extrapolation_plots, "save_all", saver)
        return _write(kind, path, synthetic=synthetic)


def _pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGBA"))


def _page(pdf: Path) -> tuple[float, float]:
    box = re.search(rb"/MediaBox \[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", pdf.read_bytes())
    x0, y0, x1, y1 = (float(v) for v in box.groups())
    return x1 - x0, y1 - y0


def _thumb(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("L").resize(THUMB, Image.Resampling.BOX), dtype=float)


def _looks_like(path: Path, size: tuple[int, int], thumb_hex: str) -> list[str]:
    """Why the PNG at ``path`` differs materially from a reference (empty when it does not)."""
    why = []
    got = Image.open(path).size
    if max(abs(a - b) for a, b in zip(got, size)) > SIZE_SLACK:
        why.append(f"size {got} against {size}")
    ref = np.frombuffer(bytes.fromhex(thumb_hex), dtype=np.uint8).reshape(THUMB[1], THUMB[0]).astype(float)
    if (d := float(np.abs(_thumb(path) - ref).max())) > THUMB_SLACK:
        why.append(f"grey difference {d:.0f} in a thumbnail pixel")
    return why


@pytest.mark.parametrize("synthetic", [False, True])
@pytest.mark.parametrize("kind", ["forest", "accuracy", "difference", "extrapolation", "gradient"])
def test_a_written_png_is_the_plain_tight_savefig_pixel_for_pixel(tmp_path, kind, synthetic):
    ours = _write(kind, tmp_path / "ours.png", synthetic=synthetic)
    plain = _written_by(_plain, kind, tmp_path / "plain.png", synthetic)
    assert [p.suffix for p in ours] == [".png", ".pdf"] and all(p.stat().st_size for p in ours)
    assert np.array_equal(_pixels(ours[0]), _pixels(plain[0]))
    # the comparison sees a figure saved without its tight box
    whole = _written_by(_untight, kind, tmp_path / "whole.png", synthetic)
    assert not np.array_equal(_pixels(whole[0]), _pixels(plain[0]))


@pytest.mark.parametrize("kind", ["forest", "accuracy", "difference", "extrapolation", "gradient"])
def test_a_written_pdf_page_holds_what_the_plain_tight_savefig_holds(tmp_path, kind):
    """The PDF shows the box measured for the PNG; the plain way measures it again with the PDF's
    own text metrics. The pages differ by less than the padding (savefig.pad_inches: 7.2 pt), so
    what the plain page holds fits on ours."""
    ours, plain = _page(_write(kind, tmp_path / "ours.png")[1]), _page(_written_by(_plain, kind, tmp_path / "plain.png")[1])
    assert all(abs(a - b) < 4.0 for a, b in zip(ours, plain)), (ours, plain)
    whole = _page(_written_by(_untight, kind, tmp_path / "whole.png")[1])
    assert not all(abs(a - b) < 4.0 for a, b in zip(whole, plain)), (whole, plain)


@pytest.mark.parametrize("kind", ["forest", "accuracy", "difference"])
def test_a_written_png_has_the_size_and_look_of_its_reference(tmp_path, kind):
    png = _write(kind, tmp_path / f"{kind}.png")[0]
    assert not _looks_like(png, *REFERENCE[kind])


def test_the_reference_check_sees_a_material_change(tmp_path):
    """Another resolution, the figure saved whole, darker seed dots, another title or the
    SYNTHETIC watermark: each is seen."""
    ref = REFERENCE["forest"]

    lowres = _written_by(lambda fig, path, **kw: _plain(fig, path, **{**kw, "dpi": 100}), "forest", tmp_path / "a.png")[0]
    assert any("size" in w for w in _looks_like(lowres, *ref))
    whole = _written_by(_untight, "forest", tmp_path / "b.png")[0]
    assert _looks_like(whole, *ref)
    save_all = plots.save_all

    def dark_dots(fig, path, **kw):
        for col in fig.axes[0].collections:
            if isinstance(col, PathCollection):  # the seed dots
                col.set_color("black")
                col.set_sizes([60])
        return save_all(fig, path, **kw)

    def retitled(fig, path, **kw):
        fig.axes[0].set_title("another title")
        return save_all(fig, path, **kw)

    for saver in (dark_dots, retitled):
        png = _written_by(saver, "forest", tmp_path / f"{saver.__name__}.png")[0]
        assert any("grey" in w for w in _looks_like(png, *ref)), saver.__name__
    assert any("grey" in w for w in _looks_like(_write("forest", tmp_path / "d.png", synthetic=True)[0], *ref))


def test_a_figure_with_its_own_layout_engine_is_laid_out_tightly_as_before(tmp_path):
    """A user's figure made with constrained layout: tight_layout replaces its engine (with the
    warning matplotlib gives), as the plain way does, and the PNG is the plain way's."""
    def fig():
        f = plots.subplots(figsize=(4, 3))[0]
        f.set_layout_engine("constrained")
        f.axes[0].plot([0, 1], [0, 2])
        f.axes[0].set_title("a title long enough to reach past the axes on both of its sides")
        return f

    with pytest.warns(UserWarning, match="layout has changed to tight"):
        ours = plots.save_all(fig(), tmp_path / "ours.png")
    with pytest.warns(UserWarning, match="layout has changed to tight"):
        plain = _plain(fig(), tmp_path / "plain.png")
    assert np.array_equal(_pixels(ours[0]), _pixels(plain[0]))
    with pytest.warns(UserWarning, match="layout has changed to tight"):
        whole = _untight(fig(), tmp_path / "whole.png")
    assert not np.array_equal(_pixels(whole[0]), _pixels(plain[0]))
