"""The stages of a study: calibration, pilot, smoke and main (dense-rewards paper C.1).

The plan names the stages it runs, every run records its stage, and only main-stage runs are
analyzed; calibration, pilot and smoke runs live apart (``<study>/stages/<stage>/``).
"""

from __future__ import annotations

from typing import Literal

STAGES = ("calibration", "pilot", "smoke", "main")
Stage = Literal["calibration", "pilot", "smoke", "main"]
