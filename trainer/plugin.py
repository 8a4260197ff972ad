"""The built-in GRPO trainer as a ``prereg_kit.runners`` plugin (``RUNNER``, registered as ``builtin``).

``prereg run`` and ``prereg elect`` find it through the entry point declared in ``pyproject.toml``
and call :meth:`BuiltinRunner.run` / :meth:`BuiltinRunner.elect`, which hand the study to
:func:`trainer.launch.run_study` and :func:`trainer.elect.elect` unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import BaseModel

from prereg_kit.plan import Plan
from trainer.config import FLAT_KEYS, SECTIONS, ConfigError, config_of

# trainer.launch and trainer.elect (the training loop's imports) are imported by the methods that
# use them: `prereg lock` loads this plugin only to check recipes, and must start fast.


class BuiltinRunner:
    """What the ``prereg`` command asks of a trainer: train a stage's runs, elect an anchor, and say
    whether it can run a configuration."""

    name = "builtin"

    def run(self, study_dir: str | Path, *, stage: str = "main", configs: Sequence[str] | None = None,
            seeds: Sequence[int] | None = None, n_jobs: int | None = None, console: Any = None,
            executor: dict | None = None, fresh_process: bool = False, trackers: Sequence[str] | None = None) -> bool:
        """Train every configuration × seed of the stage (complete runs skipped, incomplete ones
        resumed); True when no run failed. ``executor``: None (or ``{"name": "local"}``) for local
        processes, else ``{"name": "slurm" | "ray", …options}`` (``trainer.executors``).
        ``fresh_process``: locally, one process per run rather than one worker per job slot.
        ``trackers``: W&B, MLflow, TensorBoard to log every run to live (``trainer.core.tracking``);
        an unknown one, or one whose package is missing, is refused before anything starts."""
        from trainer.core.tracking import check_trackers

        names = check_trackers(trackers)
        if executor is not None and executor.get("name", "local") != "local":
            from trainer.executors.dispatch import run_on_executor  # submitit/Ray only when asked

            return run_on_executor(study_dir, stage=stage, configs=configs, seeds=seeds, executor=executor,
                                   console=console, trackers=names)
        from trainer.launch import run_study

        jobs = run_study(study_dir, stage=stage, configs=configs, seeds=seeds, n_jobs=n_jobs, console=console,
                         fresh_process=fresh_process, trackers=names)
        return not any(j.result.startswith("failed") for j in jobs)

    def check_configuration(self, plan: Plan, configuration: str) -> list[str]:
        """Why this trainer cannot run a plan configuration, one line per problem (empty: it can):
        the configuration's recipe must be valid trainer settings (``trainer.config.config_of``)."""
        try:
            config_of(plan, configuration, where="recipe")
        except ConfigError as e:
            return list(e.lines)
        return []

    def gradient_test(self, study_dir: str | Path, test_id: str, *, log: Callable[[str], None] = print) -> str:
        """Gradient test ``test_id`` of the study's plan (``trainer.gradient_test``): writes
        ``gradient/<id>/batches.parquet`` and ``meta.json``; returns the folder."""
        from trainer.gradient_test import run_gradient_test  # torch only when asked

        return str(run_gradient_test(study_dir, test_id, log=log))

    def recipe_keys(self) -> list[str]:
        """Every valid recipe key, dotted (``credit.mc_k``, ``model.tiny.layers``), and the flat keys
        of older plans (``mc_k``): what ``prereg lock`` suggests the closest of for an unknown key."""
        return recipe_keys()

    def elect(self, study_dir: str | Path, *, configuration: str | None = None, seeds: Sequence[int] | None = None,
              tokens: str | None = None, steps: int | None = None, prompts: int = 64, samples: int = 4,
              n_jobs: int | None = None, log: Callable[[str], None] = print) -> dict:
        """Anchor election (multi-reward paper §5.1): writes ``election.json`` and returns its record."""
        from trainer.elect import elect as run_election

        return run_election(study_dir, configuration=configuration, seeds=seeds, tokens=tokens, steps=steps,
                            prompts=prompts, samples=samples, n_jobs=n_jobs, log=log)


def recipe_keys() -> list[str]:
    """The dotted names of every setting in ``trainer.config.SECTIONS`` (nested tables such as
    ``model.tiny`` and ``rewards.sandbox`` give their keys too), then the flat keys (``FLAT_KEYS``)."""
    out: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            out.append(prefix + name)
            sub = f.annotation
            if isinstance(sub, type) and issubclass(sub, BaseModel):
                walk(sub, f"{prefix}{name}.")

    for section, model in SECTIONS.items():
        walk(model, f"{section}.")
    return out + [k for k in FLAT_KEYS if k not in out]


RUNNER = BuiltinRunner()
