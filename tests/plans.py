"""Plan texts shared by the tests."""

SMALL_PLAN = """\
# A small plan for tests.
[study]
id = "t1"   # study id
title = "Test study"
question = "Does B beat A?"
comparator = "A"
seeds = [0, 1, 2]

[[hypotheses]]
id = "H1"
statement = "B beats A"
prediction = "B - A > 0"
contrasts = ["C1"]
readings = { gain = "B helps", deficit = "B hurts", inconclusive = "no claim" }

[recipe]
learning_rate = 1e-6   # the shared recipe
group_size = 8

[configurations.A]
description = "control"

[configurations.B]
overrides = { learning_rate = 2e-6 }

[budget]
tokens = "1M"
eval_every = "B/16"

[evaluation]
# one set
sets = [{ name = "test", n_problems = 10 }]

[[contrasts]]
id = "C1"
treatment = "B"
control = "A"
tier = "primary"

[[contrasts]]
id = "C2"
treatment = "B"
control = "A"
at = "time"
tier = "secondary"
kind = "equivalence"
margin = 0.02

[[families]]
name = "primary"
members = ["C1"]
"""

# A plan for analysis tests: 3 configurations, 8 seeds, contrasts at every reading point,
# two primary contrasts in one Holm family, an equivalence and a non-inferiority contrast.
ANALYSIS_PLAN = """\
[study]
id = "ana"
title = "Analysis test"
question = "Are the synthetic effects recovered?"
comparator = "ctl"
seeds = "0-7"

[[hypotheses]]
id = "H1"
statement = "big beats ctl"
prediction = "big - ctl > 0"
contrasts = ["P1"]
readings = { gain = "big helps", deficit = "big hurts", inconclusive = "no claim" }

[[hypotheses]]
id = "H2"
statement = "same matches ctl"
prediction = "within 0.02"
contrasts = ["E1"]
readings = { equivalent = "same is as good", "not shown equivalent" = "no claim of equivalence" }

[configurations.ctl]
[configurations.big]
overrides = { lr = 2 }
[configurations.same]
overrides = { lr = 1.01 }

[budget]
tokens = "1M"
eval_every = "B/16"

[evaluation]
samples = 8
sets = [{ name = "math", n_problems = 120 }]

[[contrasts]]
id = "P1"
treatment = "big"
control = "ctl"
tier = "primary"
prediction = "gain"

[[contrasts]]
id = "P2"
treatment = "same"
control = "ctl"
tier = "primary"

[[contrasts]]
id = "E1"
treatment = "same"
control = "ctl"
tier = "secondary"
kind = "equivalence"
margin = 0.03

[[contrasts]]
id = "N1"
treatment = "same"
control = "ctl"
tier = "secondary"
kind = "non-inferiority"
at = "time"

[[contrasts]]
id = "X1"
treatment = "big"
control = "ctl"
at = "updates"
tier = "exploratory"

[[families]]
name = "primary"
members = ["P1", "P2"]

[statistics]
bootstrap_resamples = 500
"""
