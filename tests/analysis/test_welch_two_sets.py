"""A Welch contrast of two differences read on two test sets (S21's primary: "the two sides use
different runs, pools, and test sets", dense-rewards paper §C.5.2): the second difference is read on
``minus_eval_set``; its numbers are Welch's t on the two sets' per-seed differences (scipy)."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest
from paths import ROOT
from scipy import stats as sps

from prereg_kit.errors import PlanError
from prereg_kit.plan import validate_plan
from prereg_kit.simulate.dryrun import dry_run

EXTRA = '''
[configurations.grpo2]
description = "the other pool's treatment"
seeds = "0-3"

[configurations.frozen2]
description = "the other pool's control"
seeds = "0-3"
overrides = { learning_rate = 0.0 }

[[evaluation.sets]]
name = "heldout2"
source = "synthetic:eval"
n_problems = 48

[[contrasts]]
id = "W"
design = "welch"
treatment = "grpo"
control = "frozen"
minus_treatment = "grpo2"
minus_control = "frozen2"
minus_eval_set = "heldout2"
tier = "secondary"

[[contrasts]]
id = "X1"
treatment = "grpo"
control = "frozen"
tier = "exploratory"

[[contrasts]]
id = "X2"
treatment = "grpo2"
control = "frozen2"
eval_set = "heldout2"
tier = "exploratory"
'''


def _text(extra: str = EXTRA) -> str:
    text = (ROOT / "registry" / "cpu-grpo" / "plan.toml").read_text()
    head, sep, tail = text.partition("[budget]")
    # configurations go before [budget]; the rest (sets, contrasts) at the end
    confs, _, rest = extra.partition("[[evaluation.sets]]")
    return head + confs.lstrip("\n") + "\n" + sep + tail + "\n[[evaluation.sets]]" + rest


def test_the_second_difference_is_read_on_its_own_set(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text(_text())
    res = dry_run(path, {"C1": 0.04}, out=tmp_path / "dr", n_resamples=50, progress=False)
    rows = res.analysis.contrasts.set_index("contrast")
    w = rows.loc["W"]
    assert (w["status"], w["eval_set"], int(w["n_treatment"]), int(w["n_control"])) == ("read", "heldout / heldout2", 6, 4)
    ps = res.analysis.per_seed
    d1 = ps.loc[ps["contrast"] == "X1", "difference"].to_numpy()
    d2 = ps.loc[ps["contrast"] == "X2", "difference"].to_numpy()
    ref = sps.ttest_ind(d1, d2, equal_var=False)
    assert w["mean"] == pytest.approx(d1.mean() - d2.mean(), abs=1e-12)
    assert w["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    # the second difference really is the other set's: on heldout it would differ
    assert not np.allclose(d2, ps.loc[(ps["contrast"] == "X1") & ps["seed"].isin(range(4)), "difference"].to_numpy())


@pytest.mark.parametrize("change, message", [
    (('minus_eval_set = "heldout2"', 'minus_eval_set = "heldout3"'), "unknown evaluation set"),
    (('design = "welch"', 'design = "difference_of_differences"'), "only a welch contrast of two differences"),
    (('minus_treatment = "grpo2"', 'minus_treatment = "grpo"'), "four different configurations"),
])
def test_minus_eval_set_is_refused_where_it_cannot_mean_anything(change, message):
    text = _text().replace(*change)
    with pytest.raises(PlanError, match=message):
        validate_plan(tomllib.loads(text), source="plan.toml", text=text)
