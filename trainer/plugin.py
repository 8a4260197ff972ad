"""The built-in GRPO trainer as a ``prereg_kit.runners`` plugin (``RUNNER``, registered as ``builtin``).

``prereg run`` and ``prereg elect`` find it through the entry point declared in ``pyproject.toml``
and call :meth:`BuiltinRunner.run` / :meth:`BuiltinRunner.elect`, which hand the study to
:func:`trainer.launch.run_study` and :func:`trainer.elect.elect` unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from prereg_kit.plan import Plan
from trainer.config import ConfigError, config_of
from trainer.elect import elect as run_election
from trainer.launch import run_study


class BuiltinRunner:
    """What the ``prereg`` command asks of a trainer: train a stage's runs, elect an anchor, and say
    whether it can run a configuration."""

    name = "builtin"

    def run(self, study_dir: str | Path, *, stage: str = "main", configs: Sequence[str] | None = None,
            seeds: Sequence[int] | None = None, n_jobs: int | None = None, console: Any = None) -> bool:
        """Train every configuration × seed of the stage (complete runs skipped, incomplete ones
        resumed); True when no run failed."""
        jobs = run_study(study_dir, stage=stage, configs=configs, seeds=seeds, n_jobs=n_jobs, console=console)
        return not any(j.result.startswith("failed") for j in jobs)

    def check_configuration(self, plan: Plan, configuration: str) -> list[str]:
        """Why this trainer cannot run a plan configuration, one line per problem (empty: it can):
        the configuration's recipe must be valid trainer settings (``trainer.config.config_of``)."""
        try:
            config_of(plan, configuration, where="recipe")
        except ConfigError as e:
            return list(e.lines)
        return []

    def elect(self, study_dir: str | Path, *, configuration: str | None = None, seeds: Sequence[int] | None = None,
              tokens: str | None = None, steps: int | None = None, prompts: int = 64, samples: int = 4,
              n_jobs: int | None = None, log: Callable[[str], None] = print) -> dict:
        """Anchor election (multi-reward paper §4.5): writes ``election.json`` and returns its record."""
        return run_election(study_dir, configuration=configuration, seeds=seeds, tokens=tokens, steps=steps,
                            prompts=prompts, samples=samples, n_jobs=n_jobs, log=log)


RUNNER = BuiltinRunner()
