"""Plan texts shared by the tests, and the chain's clock for tests that lock in the past."""

from contextlib import contextmanager
from datetime import datetime
from unittest import mock

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


def plan_text(*, id: str, comparator: str, configurations: str, tokens: int | str, eval_every: str,
              n_problems: int, treatment: str, control: str | None = None, title: str = "t",
              question: str = "q", seeds: str = "[0]", recipe: str = "", evaluation: str = "",
              source: str | None = None, primary: str = "C1", metric: str | None = None,
              contrasts: str = "", tail: str = "") -> str:
    """The TOML text of a plan with one primary contrast, alone in the family "primary".

    In order: [study] (id, title, question, comparator, seeds: TOML text); [recipe] with the
    lines ``recipe`` when given; ``configurations`` (TOML text); [budget] (tokens, eval_every);
    [evaluation] with the lines ``evaluation`` and one set "heldout" of ``n_problems`` (from
    ``source`` when given); the primary contrast ``primary``: ``treatment`` against ``control``
    (by default the comparator), with ``metric`` when given; the further [[contrasts]] tables
    ``contrasts`` (text); [[families]] "primary" = [primary]; last ``tail`` (text).
    """
    src = f'source = "{source}", ' if source else ""
    return "".join([
        f'[study]\nid = "{id}"\ntitle = "{title}"\nquestion = "{question}"\n',
        f'comparator = "{comparator}"\nseeds = {seeds}\n\n',
        f"[recipe]\n{recipe}\n" if recipe else "",
        f"{configurations}\n",
        f'[budget]\ntokens = {tokens}\neval_every = "{eval_every}"\n\n',
        f'[evaluation]\n{evaluation}sets = [{{ name = "heldout", {src}n_problems = {n_problems} }}]\n\n',
        f'[[contrasts]]\nid = "{primary}"\ntreatment = "{treatment}"\ncontrol = "{control or comparator}"\n',
        'tier = "primary"\n' + (f'metric = "{metric}"\n' if metric else "") + "\n",
        contrasts,
        f'[[families]]\nname = "primary"\nmembers = ["{primary}"]\n',
        tail,
    ])


def run_plan(*, configurations: str, tokens: int | str, eval_every: str, samples: int, n_problems: int,
             recipe: str = "", task: str = "synthetic", task_levels: str = "[1]", task_train_problems: int = 200,
             warm_steps: int = 30, completion_limit: int = 24, greedy: bool = False, stages: bool = True,
             smoke_seeds: str | None = "[0]", smoke_configurations: str | None = None,
             train_to: str | None = None, **study) -> str:
    """The plan of a short real run of the tiny model (1 layer, hidden size 32), as ``plan_text``.

    [recipe]: the shared tiny-run lines (``task`` with its levels and training problems, the tiny
    model, a warm start of ``warm_steps`` steps, 2 prompts × 4 completions of at most
    ``completion_limit`` tokens, learning rate 1e-3, 1 thread), then the extra lines ``recipe``.
    [evaluation]: ``samples`` (and ``greedy = true`` when asked) on ``n_problems`` problems of
    "synthetic:eval". With ``stages``: [[stages]] "smoke" (with ``smoke_seeds``,
    ``smoke_configurations`` and ``train_to`` where given) and "main". ``study`` goes on to
    ``plan_text`` (id, title, question, comparator, treatment, seeds, ...).
    """
    shared = (f'task = "{task}"\ntask_levels = {task_levels}\ntask_train_problems = {task_train_problems}\n'
              'model = "tiny"\ntiny = { hidden_size = 32, layers = 1, heads = 2, intermediate_size = 64 }\n'
              f"warm_start = {{ steps = {warm_steps}, batch_size = 16, learning_rate = 3e-3 }}\n"
              f"prompts_per_iteration = 2\ngroup_size = 4\ncompletion_limit = {completion_limit}\n"
              "learning_rate = 1e-3\nthreads = 1\n")
    smoke = "".join([f"seeds = {smoke_seeds}\n" if smoke_seeds else "",
                     f"configurations = {smoke_configurations}\n" if smoke_configurations else "",
                     f'train_to = "{train_to}"\n' if train_to else ""])
    return plan_text(
        recipe=shared + recipe, configurations=configurations, tokens=tokens, eval_every=eval_every,
        evaluation=f"samples = {samples}\n" + ("greedy = true\n" if greedy else ""), n_problems=n_problems,
        source="synthetic:eval", tail=f'\n[[stages]]\nname = "smoke"\n{smoke}\n[[stages]]\nname = "main"\n' if stages else "",
        **study)


# --------------------------------------------------------------------------- the chain's clock


@contextmanager
def clock_at(t: datetime):
    """Entries appended to a lock chain inside this block are dated ``t``: the chain reads the time
    from ``prereg_kit.chain.lock.utc_now`` only (no caller can pass one), so tests that need a lock in
    the past set that clock."""
    with mock.patch("prereg_kit.chain.lock.utc_now", return_value=t):
        yield


def lock_at(plan, t: datetime):
    from prereg_kit.chain.lock import lock_plan

    with clock_at(t):
        return lock_plan(plan)


def amend_at(plan, reason: str, t: datetime):
    from prereg_kit.chain.lock import amend_plan

    with clock_at(t):
        return amend_plan(plan, reason)
