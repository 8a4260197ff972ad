"""The stages of a study: calibration, pilot, smoke and main (dense-rewards paper C.1).

The plan names the stages it runs, every run records its stage, and only main-stage runs are
analyzed; calibration, pilot and smoke runs live apart (``<study>/stages/<stage>/``). What the stages
before main decide: ``calibration`` (the budget and truncation rules, written by amendment) and
``probe`` (the pilot stage's learning-rate stability probe).
"""

from __future__ import annotations

from typing import Literal

STAGES = ("calibration", "pilot", "smoke", "main")
Stage = Literal["calibration", "pilot", "smoke", "main"]

# The stages whose results stay hidden while they train: the main stage is analyzed as the plan
# fixed it, so nobody reads its accuracy, rewards or contrasts before `prereg analyze`
# (`prereg status`, the progress lines and bars, live trackers).
BLIND_STAGES = frozenset({"main"})


def is_blind(stage: str) -> bool:
    """Whether ``stage``'s runs may show only their progress and compute while they train."""
    return stage in BLIND_STAGES
