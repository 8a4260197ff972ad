"""The recheck's cross-row checks (prereg_kit/registry/relations.py): each one passes on printed
numbers that hold together and fails on one wrong printed number; the pooled and per-seed relations
are checked against per-seed data summarized independently (scipy's t quantile, numpy's SD)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from prereg_kit.errors import PreregError
from prereg_kit.registry import ReportedRow, recheck_row, recheck_study
from prereg_kit.registry.relations import combination, pooled, printed_row, same_statistic


def _t_row(x: np.ndarray, decimals: int = 4) -> dict:
    """A per-seed sample printed as a paper prints it: n, mean and 95% paired-t interval, rounded."""
    n, m, s = len(x), float(np.mean(x)), float(np.std(x, ddof=1))
    h = stats.t.ppf(0.975, n - 1) * s / np.sqrt(n)
    f = f"{{:+.{decimals}f}}"
    return {"n": n, "mean": f.format(m), "ci_low": f.format(m - h), "ci_high": f.format(m + h)}


def _printed(label: str, r: dict, unit: str = "fraction"):
    return printed_row(label, mean=r["mean"], ci_low=r["ci_low"], ci_high=r["ci_high"], n=r["n"], unit=unit)


@pytest.fixture(scope="module")
def seeds():
    rng = np.random.default_rng(7)
    a = rng.normal(0.010, 0.012, 12)  # filter − outcome on seeds 0-11
    b = rng.normal(0.006, 0.015, 24)  # the same on seeds 12-35
    r = rng.normal(0.000, 0.011, 36)  # random − outcome on seeds 0-35
    return a, b, r


def test_pooled_rows_match_the_pooled_data_and_a_wrong_width_or_mean_fails(seeds):
    a, b, _ = seeds
    whole = _t_row(np.concatenate([a, b]))
    good = pooled(_printed("all", whole), [_printed("a", _t_row(a)), _printed("b", _t_row(b))])
    assert good.ok, good.lines
    assert {t["test"] for t in good.tests} == {"pooled_n", "pooled_mean", "pooled_half_width"}
    # one printed bound of the pooled row moved by 0.001 each way (still symmetric): the width fails
    m, lo, hi = float(whole["mean"]), float(whole["ci_low"]), float(whole["ci_high"])
    wide = dict(whole, ci_low=f"{lo - 0.001:+.4f}", ci_high=f"{hi + 0.001:+.4f}")
    bad = pooled(_printed("all", wide), [_printed("a", _t_row(a)), _printed("b", _t_row(b))])
    assert not bad.ok and [t["test"] for t in bad.tests if not t["match"]] == ["pooled_half_width"]
    shifted = dict(whole, mean=f"{m + 0.001:+.4f}", ci_low=f"{lo + 0.001:+.4f}", ci_high=f"{hi + 0.001:+.4f}")
    bad = pooled(_printed("all", shifted), [_printed("a", _t_row(a)), _printed("b", _t_row(b))])
    assert [t["test"] for t in bad.tests if not t["match"]] == ["pooled_mean"]
    # a part's n that does not add up
    bad = pooled(_printed("all", dict(whole, n=37)), [_printed("a", _t_row(a)), _printed("b", _t_row(b))])
    assert "pooled_n" in [t["test"] for t in bad.tests if not t["match"]]


def test_three_way_pooling_and_the_between_part_term(seeds):
    a, b, _ = seeds
    c = a + 0.04  # a third seed set with another mean: the between-part term matters
    data = np.concatenate([a, b, c])
    whole = _t_row(data)
    parts = [_printed("a", _t_row(a)), _printed("b", _t_row(b)), _printed("c", _t_row(c))]
    assert pooled(_printed("all", whole), parts).ok
    # an interval from the within-part SDs alone (the between-part term left out) is caught
    n = len(data)
    s_within = np.sqrt(sum((len(x) - 1) * np.var(x, ddof=1) for x in (a, b, c)) / (n - 1))
    h = stats.t.ppf(0.975, n - 1) * s_within / np.sqrt(n)
    m = float(np.mean(data))
    narrow = dict(whole, ci_low=f"{m - h:+.4f}", ci_high=f"{m + h:+.4f}")
    bad = pooled(_printed("all", narrow), parts)
    assert [t["test"] for t in bad.tests if not t["match"]] == ["pooled_half_width"]


def test_per_seed_difference_and_sum_hold_and_a_wrong_mean_or_sd_fails(seeds):
    a, _, _ = seeds
    rng = np.random.default_rng(3)
    r = a + rng.normal(-0.004, 0.01, len(a))  # random − outcome on the same 12 seeds
    f_o, r_o, r_f = _t_row(a), _t_row(r), _t_row(r - a)
    assert combination(_printed("r-f", r_f), _printed("r-o", r_o), _printed("f-o", f_o), -1).ok
    assert combination(_printed("r-o", r_o), _printed("r-f", r_f), _printed("f-o", f_o), +1).ok
    m = float(r_f["mean"])
    moved = dict(r_f, mean=f"{m + 0.003:+.4f}", ci_low=f"{float(r_f['ci_low']) + 0.003:+.4f}",
                 ci_high=f"{float(r_f['ci_high']) + 0.003:+.4f}")
    bad = combination(_printed("r-f", moved), _printed("r-o", r_o), _printed("f-o", f_o), -1)
    assert [t["test"] for t in bad.tests if not t["match"]] == ["difference_mean"]
    # an interval wider than s_a + s_b allows (the triangle inequality of SDs)
    sd_max = np.std(r, ddof=1) + np.std(a, ddof=1)
    h = stats.t.ppf(0.975, 11) * sd_max * 1.2 / np.sqrt(12)
    wide = dict(r_f, ci_low=f"{m - h:+.4f}", ci_high=f"{m + h:+.4f}")
    bad = combination(_printed("r-f", wide), _printed("r-o", r_o), _printed("f-o", f_o), -1)
    assert [t["test"] for t in bad.tests if not t["match"]] == ["difference_sd"]
    with pytest.raises(ValueError, match="paired-t"):
        combination(_printed("r-f", r_f), _printed("r-o", dict(r_o, n=None)), _printed("f-o", f_o), -1)


def test_same_statistic_across_units_and_a_wrong_bound_fails():
    frac = printed_row("text", mean="+0.0112", ci_low="0.0020", ci_high="0.0205", n=24, unit="fraction")
    pts = printed_row("table", mean="+1.1", ci_low="+0.2", ci_high="+2.0", n=24, unit="points")
    assert same_statistic(pts, frac).ok
    off = printed_row("table", mean="+1.1", ci_low="+0.4", ci_high="+2.0", n=24, unit="points")
    assert [t["test"] for t in same_statistic(off, frac).tests if not t["match"]] == ["same_low"]
    other_n = printed_row("table", mean="+1.1", ci_low="+0.2", ci_high="+2.0", n=12, unit="points")
    assert not same_statistic(other_n, frac).ok
    welch = printed_row("w", mean="+0.0112", ci_low="0.0020", ci_high="0.0205", n=24, unit="fraction", ci_kind="welch")
    assert not same_statistic(welch, frac).ok


def test_row_checks_and_second_printings_make_a_row_consistent_or_inconsistent():
    base = dict(id="T9", label="realized − predicted", n=18, mean="-0.14", ci_low="-0.39", ci_high="+0.10",
                unit="points", source="Table 9")
    ok = ReportedRow(**base, checks=[{"rule": "difference", "of": ["0.393", "0.394"], "printed": "-0.14", "scale": 100}])
    assert recheck_row("T", ok).status == "consistent"
    assert recheck_row("T", ReportedRow(**base)).status == "no test"
    wrong = ReportedRow(**base, checks=[{"rule": "difference", "of": ["0.393", "0.398"], "printed": "-0.14", "scale": 100}])
    assert recheck_row("T", wrong).status == "inconsistent"
    with pytest.raises(ValueError, match="own printed numbers"):  # a check that does not test this row
        ReportedRow(**base, checks=[{"rule": "difference", "of": ["0.393", "0.394"], "printed": "-0.10", "scale": 100}])
    row = dict(id="T13", label="equal time", n=54, mean="+0.010", ci_low="+0.006", ci_high="+0.015", source="Table 13")
    text = {"mean": "1.0", "ci_low": "0.6", "ci_high": "1.5", "unit": "points", "source": "§4.1"}
    assert recheck_row("T", ReportedRow(**row, printed_elsewhere=[text])).status == "consistent"
    moved = ReportedRow(**row, printed_elsewhere=[dict(text, ci_high="1.7")])
    checked = recheck_row("T", moved)
    assert checked.status == "inconsistent" and any("MISMATCH" in c for c in checked.checks)


def _write(root: Path, study: str, rows: list[dict]) -> None:
    d = root / study
    d.mkdir(parents=True, exist_ok=True)
    lines = [f'study = "{study}"', 'paper = "dense-rewards"', ""]
    for r in rows:
        lines.append("[[rows]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in r.items()]
        lines.append("")
    (d / "reported.toml").write_text("\n".join(lines), encoding="utf-8")


def _row(rid: str, r: dict, **extra) -> dict:
    return {"id": rid, "label": rid, **r, "source": "test", **extra}


def test_relations_across_studies_attach_to_every_row_they_name(tmp_path, seeds):
    a, b, _ = seeds
    _write(tmp_path, "A", [_row("f12", _t_row(a))])
    _write(tmp_path, "B", [_row("f24", _t_row(b)), _row("f36", _t_row(np.concatenate([a, b])), pooled_from=["A:f12", "f24"])])
    got = {r.row: r.status for d in ("A", "B") for r in recheck_study(tmp_path / d)}
    assert got == {"f12": "consistent", "f24": "consistent", "f36": "consistent"}
    # a wrong width in the part of another study fails the part and the row that pools it
    lo = float(_t_row(a)["ci_low"])
    wide = dict(_t_row(a), ci_low=f"{lo - 0.004:+.4f}", ci_high=f"{float(_t_row(a)['ci_high']) + 0.004:+.4f}")
    _write(tmp_path, "A", [_row("f12", wide)])
    got = {r.row: r.status for d in ("A", "B") for r in recheck_study(tmp_path / d)}
    assert got == {"f12": "inconsistent", "f24": "inconsistent", "f36": "inconsistent"}
    # an explanation in the record makes its own row explained, not the others
    _write(tmp_path, "A", [_row("f12", wide, explanation="a printing error")])
    got = {r.row: r.status for d in ("A", "B") for r in recheck_study(tmp_path / d)}
    assert got["f12"] == "explained" and got["f36"] == "inconsistent"


def test_a_relation_to_a_row_that_is_not_there_is_a_record_error(tmp_path, seeds):
    a, b, _ = seeds
    _write(tmp_path, "A", [_row("f12", _t_row(a)), _row("d", _t_row(a - b[:12]), difference_of=["f12", "B:nope"])])
    _write(tmp_path, "B", [_row("f24", _t_row(b))])
    with pytest.raises(PreregError, match="no study 'B'|no row 'nope'"):
        recheck_study(tmp_path / "A")
    assert {r.status for r in recheck_study(tmp_path / "B")} == {"no test"}  # B itself still rechecks
    with pytest.raises(ValueError, match="names two rows"):
        ReportedRow(id="x", label="x", n=12, mean="0.1", ci_low="0.0", ci_high="0.2", source="t", difference_of=["a"])
