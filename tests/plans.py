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
