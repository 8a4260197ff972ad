"""``prereg run --executor slurm|ray``: the options checked, then the study handed to the executor.

:func:`run_on_executor` is what :meth:`trainer.plugin.BuiltinRunner.run` calls for ``--executor
slurm|ray``; the local launcher stays :func:`trainer.launch.run_study`. Submitit and Ray are
imported only when a study is submitted (``trainer.executors.slurm`` / ``ray_exec`` load them
inside their functions), so ``prereg --help`` never loads them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from prereg_kit.errors import PreregError
from trainer.executors.options import RayOptions, SlurmOptions, check_gpu_share, executor_options
from trainer.executors.ray_exec import run_ray
from trainer.executors.slurm import submit_slurm


def run_on_executor(study_dir: str | Path, *, stage: str, configs: Sequence[str] | None, seeds: Sequence[int] | None,
                    executor: dict[str, Any], console: Any = None, trackers: Sequence[str] = ()) -> bool:
    """Submit (and, for Ray or ``wait``, follow) a stage's runs on the named executor; True when no
    run failed (or, submitted without waiting, when every run was submitted). ``trackers``: the
    live trackers each run logs to from its worker (``trainer.core.tracking``)."""
    opts = executor_options(executor, stage)
    if opts is None:
        raise ValueError("run_on_executor: the local launcher is trainer.launch.run_study")
    check_gpu_share(opts.gpus_per_run, stage)
    if isinstance(opts, SlurmOptions) and stage == "calibration" and not opts.wait:
        raise PreregError("--executor slurm --stage calibration needs --wait: the calibration amendment is "
                          "written from the finished runs")

    def say(msg: str) -> None:
        if console is not None:
            console.print(msg, markup=False, highlight=False)
        else:
            print(msg, flush=True)

    if isinstance(opts, SlurmOptions):
        return submit_slurm(study_dir, stage, configs, seeds, opts, say, trackers)
    assert isinstance(opts, RayOptions)
    return run_ray(study_dir, stage, configs, seeds, opts, say, trackers)


__all__ = ["run_on_executor"]
