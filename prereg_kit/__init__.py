"""prereg-kit: preregistered, matched-compute validation of RL training interventions.

The core package needs no torch: plans, locks, run logs, readings, statistics, analysis, report.
"""

__version__ = "0.1.0"
