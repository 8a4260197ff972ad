"""The report's figure files as written: each PNG pixel for pixel what ``tight_layout`` and
``savefig(bbox_inches="tight")`` write (the plain way, which draws twice per file), of the pixel
size and look of a reference rendered by that plain way, and a PDF page the size of the plain
way's (within its padding), so nothing is cut off."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from PIL import Image

from prereg_kit.analysis.gradient import GradientResults
from prereg_kit.readings.extrapolation import Extrapolation
from prereg_kit.report import extrapolation_plots, plots
from prereg_kit.report import gradient as gradient_report

pytestmark = pytest.mark.figures  # reads the report's figures (tests/conftest.py)

THUMB = (48, 16)  # width, height of the grey thumbnail a reference keeps
# rendered by the plain way (tight_layout, then savefig(bbox_inches="tight") per file) at dpi 120:
# the PNG's pixel size and a BOX-filtered grey thumbnail, one hex byte per pixel, row by row
REFERENCE = {
    "forest": ((1115, 461),
        "fffffffffffffffffffffffffff8dad8ead7d9d4e4d5d5d6ddf5e1d7d9efffffffffffffffffffffffffffffffffffff"
        "fffffffffff3f3f3f3f3f3f3f3f2e3e1e3e3dae3e3e3e6f3f3f3f3f3f3f3f3f3f3f3f3f3f3f0ddeae7e6eee5e9eaf7fc"
        "f2eceef4dfdfffeeece6ecd6ece8d6d7dfe8dae8e8e8ecfffffffffefffffffefffffffffef1e8f3e6e7e4ebe6ebebf6"
        "fffffffffff0fffffffefffffffce7e8e6e8dae8e8e8ecfffffffffefffffffefffffffffef1eef6d9dadadae6edfffc"
        "f6f7f1f8eae3fffffffeffffeeead3d8c6d8c9d7d7e0ecfffffffffefffffffefffffffffef1fafbf8f9f9f9fdfdfdfd"
        "fbfafdfbf4ecfffffffefffffffde8e8e4e8dae8e8e8ecfffffffffefffffffefffffffffef1ffffffffffffffffffff"
        "fbfbfefff9edfffffffefffffffde8e8e8e8dae8e8e2ecfafffffefefffffffefffffffffef1ffffffffffffffffffff"
        "f6f3f0f5e5e3fffffffefffffffde8e8e8dfd2dcded6e2f2f3f2f8fefffffffefffffffffef1ffffffffffffffffffff"
        "fffffffffff0fffffffefffffffde8e8e8e8dae8e8e8ecfffffffffefffffffefffffffffef1ffffffffffffffffffff"
        "f2f0eef5e0e0fffffffefffffffde8e8e8e8dae8e8e8e2f3edf3e1f2edf3f2f7fffffffffef1ffffffffffffffffffff"
        "fffffffffff0fffffffefffffffde8e8e8e8dae8e8e8ecfffffffffefffffffefffffffffef1ffffffffffffffffffff"
        "f2edeef5e0e0fffffffefffffffde8e8e8e8dae8e8e8ecfffffffff2f3edf3e6f3eef3f1faf1ffffffffffffffffffff"
        "fffffffffff0f3f3f3f2f3f3f3f1dedededed1dededee1f3f3f3f3f2f3f3f3f2f3f3f3f3f2ecffffffffffffffffffff"
        "fffffffffffffffff7e1eafffde6e0ffffefe1f8ffffdeefffffedddfffff7e3efffffe8e0ffffffffffffffffffffff"
        "ffffffffffffffffffffffffffdee1e3e9ede7e4e0e5e2e2ede6e9eee4e3f6ffffffffffffffffffffffffffffffffff"
        "ffffffffffffffffffffffffffffffffe7e3e7ebe2e6efe3ebe6e0faffffffffffffffffffffffffffffffffffffffff"),
    "accuracy": ((1419, 523),
        "ffffffffffffffffffffffffffffffffffffffffffffefe3deeaffffffffffffffffffffffffffffffffffffffffffff"
        "fffffffffffffffcf5f2f4f5f5f1f3f5fffffffffffffffffffffffff6f5f3f6f3fcffffffffffffffffffffffffffff"
        "fffff8f4f5f5f4efebe6e7e5e7e5e9e7f3f4f5f5ebf6f4f5f5f5f4f5e7ece6e8e8f0f5f5f5f4f5f1eff4e9edebe8fdfd"
        "ffede6fdfefefdfefefdfefdfefefdfefefdfaefe7f1fdfefefefdfefefdfefefefdfefefef7edf1f5f3eaeeedeafefd"
        "fffff4fefffffefffffefffefffffefffaeee5e1e6f3fefffffffefffffefffffffefff9ebe3e2f2f0e8dadcdbd9dbf3"
        "f9ede5fdfefefdfefefdfefdfefef8ece3dfd8dde8f1fdfefefefdfefefdfefefdf6e8e2ded8e2f3fdfdfdfdfdfdfdfe"
        "e4fff4fefffffefffffefffef9ece3ded8dff4feebf3fefffffffefffffefef7e9e1dbdae4f5fef4ffffffffffffffff"
        "e5ece6fdfefefdfefefcf7e7e2ddd8e1f4fcfefeeaf1fdfefefefdfefcf4e6e1dcd9e5f6fefdfef3ffffffffffffffff"
        "e9fff4fefffffefef7e8e2dbd9e3f5fffffeffffebf3fefffffffcf5e8e0d9dae8f7fffffffefff4ffffffffffffffff"
        "e6ece4fdfefdf4e6e1dcdae4f6fefdfefefdfefeeaf1fdfefbf2e4e0dadae9f8fefdfefefefdfef3ffffffffffffffff"
        "edfff4fdf4e8e0d9dbe7f8fefffffefffffeffffebf3fbf1e7e1d6dbedf9fffffffefffffffefff4ffffffffffffffff"
        "ffeee5f4e0dad9e9f8fdfefdfefefdfefefdfefeebf1eee1d8dbedfafefdfefefefdfefefefdfef3ffffffffffffffff"
        "fffff4f0dbecf9fffffefffefffffefffffeffffebf3e8dcf1fcfefffffefffffffefffffffefff4ffffffffffffffff"
        "ffeee3fafafefdfefefdfefdfefefdfefefdfefeeaf1f8fcfefefdfefefdfefefefdfefefefdfef3ffffffffffffffff"
        "fffffde0eff4ddf4ede6f4eaebf4def3f1e2f4ebe7fbe8f4f4ede5f4f4e1f0f4f4dbf4f4e8e7f4f7ffffffffffffffff"
        "fffffffffffffffce5e4e9e4e9eae6ebffffffffffffffffffffffeee6e9e6ece8e5ffffffffffffffffffffffffffff"),
    "difference": ((1054, 491),
        "ffffffffffffffffffffffffffffffffffffddd0d7dfd9f8ffffffffffffffffffffffffffffffffffffffffffffffff"
        "ffffeee2eaf2e6e7e7e7e7e7e5e7e7e7e7e7e7e5e7e7e7e7e7e5e7e7e7e7e7e7e5e7e7eee8f7f0f1f1f4ede7eee9e4f7"
        "ffffffffeffffefffffffffffdfffffffffffffdfffffffffffdfffffffffffffdffffffeff8f3ece2e2dbe6fffffffc"
        "ebf5fbf7effffefffffffffffdfffffffffffffdfffffffffffdfffffffffffffdffffffeffcfbf9f4f8f1fafdfdfdfd"
        "e6f3f2eae3e9e8e9e9e9e9e9e8e9e9e9e9e9e9e8e9e9e9e9e9e8e9e9e9e9e9e9e8e9e9e9ddffffffffffffffffffffff"
        "e8f7ffffe5e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8dcffffffffffffffffffffff"
        "e9f0eee5e2e7e6e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7dbffffffffffffffffffffff"
        "edf3ffffe5e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8dcffffffffffffffffffffff"
        "e9f5eedfdedddcdddddddddddcdddddddddddddcdddddddddddcdddddddddddddcddddddd4ffffffffffffffffffffff"
        "edf6ffffe5e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8dcffffffffffffffffffffff"
        "e3f4f8f4e5e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8dcffffffffffffffffffffff"
        "dff0f2f0e2e7e6e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7e7e7e6e7e7e7e7e7e7e6e7e7e7dbffffffffffffffffffffff"
        "ffffffffe5e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8e8e8e7e8e8e8e8e8e8e7e8e8e8dcffffffffffffffffffffff"
        "fffaebe3e5ebeaececececece9ecececececece9ececececece9ecececececece9ececece0ffffffffffffffffffffff"
        "fffffffffff6f6ffffffffffe0fffffffffff0edffffffffffddffffffffffededffffffffffffffffffffffffffffff"
        "ffffffffffffffffffffffffffffede4e6e9e2e7e2e9e6eae7e5e5ffffffffffffffffffffffffffffffffffffffffff"),
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


def _plain(fig, path, *, dpi=120, rect=None, pdf=True):
    """The plain way: lay out, then let each savefig draw once more to find the tight box (the
    PDF left out with ``pdf=False``, where only the PNG is read)."""
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    if pdf:
        fig.savefig(Path(path).with_suffix(".pdf"), bbox_inches="tight")
    return [Path(path), Path(path).with_suffix(".pdf")]


def _untight(fig, path, *, dpi=120, rect=None, pdf=True):
    """Laid out, but saved whole: what the tight box is there to prevent (margins, or text cut)."""
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi)
    if pdf:
        fig.savefig(Path(path).with_suffix(".pdf"))
    return [Path(path), Path(path).with_suffix(".pdf")]


def _png_only(saver):
    return lambda fig, path, **kw: saver(fig, path, **kw, pdf=False)


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


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """Each figure kind written once per module, three ways: as the report writes it (``ours``),
    the plain way (``plain``) and saved whole (``whole``), read by the PNG, PDF and reference
    tests alike. The plain and whole PDFs are written only where a test reads them (the
    non-synthetic figures)."""
    folder, done = tmp_path_factory.mktemp("drawn"), {}

    def files(kind: str, synthetic: bool = False) -> dict[str, list[Path]]:
        if (kind, synthetic) not in done:
            d = folder / f"{kind}-{synthetic}"
            plain, whole = (_png_only(s) if synthetic else s for s in (_plain, _untight))
            done[kind, synthetic] = {"ours": _write(kind, d / "ours.png", synthetic=synthetic),
                                     "plain": _written_by(plain, kind, d / "plain.png", synthetic),
                                     "whole": _written_by(whole, kind, d / "whole.png", synthetic)}
        return done[kind, synthetic]
    return files


# every kind plain and marked synthetic; the default suite leaves three of the five marked kinds
# to the slow step (every kind marks its panels by the same `plots.decorate`)
@pytest.mark.parametrize("kind,synthetic", [
    *((k, False) for k in ("forest", "accuracy", "difference", "extrapolation", "gradient")),
    ("forest", True), ("accuracy", True),
    *(pytest.param(k, True, marks=pytest.mark.slow) for k in ("difference", "extrapolation", "gradient"))])
def test_a_written_png_is_the_plain_tight_savefig_pixel_for_pixel(drawn, kind, synthetic):
    f = drawn(kind, synthetic)
    ours, plain = f["ours"], f["plain"]
    assert [p.suffix for p in ours] == [".png", ".pdf"] and all(p.stat().st_size for p in ours)
    assert np.array_equal(_pixels(ours[0]), _pixels(plain[0]))
    # the comparison sees a figure saved without its tight box
    assert not np.array_equal(_pixels(f["whole"][0]), _pixels(plain[0]))


@pytest.mark.parametrize("kind", ["forest", "accuracy", "difference", "extrapolation", "gradient"])
def test_a_written_pdf_page_holds_what_the_plain_tight_savefig_holds(drawn, kind):
    """The PDF shows the box measured for the PNG; the plain way measures it again with the PDF's
    own text metrics. The pages differ by less than the padding (savefig.pad_inches: 7.2 pt), so
    what the plain page holds fits on ours."""
    f = drawn(kind)
    ours, plain = _page(f["ours"][1]), _page(f["plain"][1])
    assert all(abs(a - b) < 4.0 for a, b in zip(ours, plain)), (ours, plain)
    whole = _page(f["whole"][1])
    assert not all(abs(a - b) < 4.0 for a, b in zip(whole, plain)), (whole, plain)


@pytest.mark.parametrize("kind", ["forest", "accuracy", "difference"])
def test_a_written_png_has_the_size_and_look_of_its_reference(drawn, kind):
    png = drawn(kind)["ours"][0]
    assert not _looks_like(png, *REFERENCE[kind])


def test_the_reference_check_sees_a_material_change(drawn, tmp_path):
    """Another resolution, the figure saved whole, darker seed dots, another title or the
    SYNTHETIC watermark: each is seen."""
    ref = REFERENCE["forest"]

    lowres = _written_by(lambda fig, path, **kw: _plain(fig, path, **{**kw, "dpi": 100}, pdf=False), "forest",
                         tmp_path / "a.png")[0]
    assert any("size" in w for w in _looks_like(lowres, *ref))
    assert _looks_like(drawn("forest")["whole"][0], *ref)
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
    assert any("grey" in w for w in _looks_like(drawn("forest", synthetic=True)["ours"][0], *ref))


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
