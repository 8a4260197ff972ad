"""``prereg run``: hand a stage's configurations × seeds to the installed trainer.

The trainer (``prereg_kit.runners``) trains; this module only reads the command line. With
``--executor slurm|ray`` the options travel to the runner as a plain dict (``{"name": "slurm", …}``,
docs/scale-out.md): the core never imports the trainer's option model.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ..errors import PreregError
from .base import RUNNER_HELP, err, handles_errors, out, seed_list, split_values

EXECUTORS = ("local", "slurm", "ray")
# which executors each option belongs to (the option's flag, the dict key the runner gets)
_OPTION_OF = {
    "partition": ("--partition", ("slurm",)), "account": ("--account", ("slurm",)),
    "gpus_per_run": ("--gpus-per-run", ("slurm", "ray")), "cpus_per_run": ("--cpus-per-run", ("slurm", "ray")),
    "mem_gb": ("--mem-gb", ("slurm",)), "time_min": ("--time-min", ("slurm",)),
    "array_parallelism": ("--array-parallelism", ("slurm",)), "constraint": ("--constraint", ("slurm",)),
    "sbatch": ("--sbatch", ("slurm",)), "backend": ("--slurm-backend", ("slurm",)), "wait": ("--wait", ("slurm",)),
    "address": ("--ray-address", ("ray",)), "retries": ("--retries", ("ray",)),
}


def executor_dict(executor: str, jobs: int | None, given: dict[str, Any]) -> dict[str, Any] | None:
    """The executor's options as the runner gets them (None: local); refuses an option of another executor."""
    if executor not in EXECUTORS:
        raise PreregError(f"--executor {executor!r}: unknown executor (have: {', '.join(EXECUTORS)})")
    for key, value in given.items():
        flag, owners = _OPTION_OF[key]
        if value not in (None, False, []) and executor not in owners:
            raise PreregError(f"{flag} is an option of --executor {' or '.join(owners)}, not of --executor {executor}")
    if executor == "local":
        return None
    if jobs is not None:
        raise PreregError(f"--jobs is an option of --executor local; with --executor {executor} use "
                          + ("--array-parallelism" if executor == "slurm" else "--gpus-per-run / --cpus-per-run"))
    return {"name": executor} | {k: v for k, v in given.items() if k in _OPTION_OF and executor in _OPTION_OF[k][1]
                                 and v not in (None, [])}


def _takes_executor(run_fn: Any, name: str = "executor") -> bool:
    """Whether the runner's ``run`` takes the keyword ``name`` (a runner of its own may not)."""
    try:
        params = inspect.signature(run_fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


@handles_errors
def run(study_dir: Annotated[Path, typer.Argument(help="Study folder (holding plan.toml).")],
        stage: Annotated[str, typer.Option(help="Stage to run: main (needs a locked plan), smoke, pilot, calibration.")] = "main",
        configs: Annotated[list[str] | None, typer.Option("--configs", help="Configurations to run (comma-separated or repeated); default all.")] = None,
        seeds: Annotated[list[str] | None, typer.Option("--seeds", help="Seeds to run: 0,1 or 0-3 (repeatable); default all.")] = None,
        jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Runs at once (default: one per GPU; 1 on CPU). Local executor only.")] = None,
        runner: Annotated[str | None, typer.Option("--runner", help=RUNNER_HELP)] = None,
        executor: Annotated[str, typer.Option("--executor", help="Where the runs train: local (processes here), slurm (one job array, submitit), ray (one task per run). docs/scale-out.md")] = "local",
        partition: Annotated[str | None, typer.Option(help="Slurm partition.")] = None,
        account: Annotated[str | None, typer.Option(help="Slurm account.")] = None,
        gpus_per_run: Annotated[float | None, typer.Option("--gpus-per-run", help="GPUs per run (slurm, ray; default 1; 0: CPU). Fractions (ray) only in the smoke and pilot stages.")] = None,
        cpus_per_run: Annotated[float | None, typer.Option("--cpus-per-run", help="CPUs per run (slurm, ray).")] = None,
        mem_gb: Annotated[float | None, typer.Option("--mem-gb", help="Memory per run in GB (slurm).")] = None,
        time_min: Annotated[int | None, typer.Option("--time-min", help="Time limit of one attempt in minutes (slurm; default 180); a timed-out run requeues and resumes.")] = None,
        array_parallelism: Annotated[int | None, typer.Option("--array-parallelism", help="Array tasks running at once (slurm; default 256).")] = None,
        constraint: Annotated[str | None, typer.Option(help="Slurm --constraint, e.g. the GPU type (h100).")] = None,
        sbatch: Annotated[list[str] | None, typer.Option("--sbatch", help="Extra sbatch flag KEY=VALUE (repeatable), e.g. --sbatch qos=high.")] = None,
        slurm_backend: Annotated[str | None, typer.Option("--slurm-backend", help="slurm (sbatch) or local (submitit's LocalExecutor: no cluster).")] = None,
        wait: Annotated[bool, typer.Option("--wait", help="Slurm: wait for the array to end and report (exit 1 if a run failed).")] = False,
        ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray cluster address (default: start a local cluster).")] = None,
        retries: Annotated[int | None, typer.Option("--retries", help="Ray: retries of a run whose worker was lost (default 3).")] = None,
        fresh_process: Annotated[bool, typer.Option("--fresh-process", help="One process per run, not one worker process per job slot training its runs in turn (local executor). docs/cli.md")] = False,
        tracker: Annotated[list[str] | None, typer.Option("--tracker", help="Also log every run live to wandb, mlflow or tensorboard (comma-separated or repeated; the tool's extra); blind in the main stage: progress and compute only. docs/trainer.md")] = None) -> None:
    """Train every configuration x seed of the plan's stage; skip complete runs, resume incomplete ones."""
    from ..plan import resolve_plan_path  # the plan's models (pydantic) only when a command runs: --help starts fast
    from .runners import load_runner

    given = {"partition": partition, "account": account, "gpus_per_run": gpus_per_run, "cpus_per_run": cpus_per_run,
             "mem_gb": mem_gb, "time_min": time_min, "array_parallelism": array_parallelism, "constraint": constraint,
             "sbatch": sbatch or [], "backend": slurm_backend, "wait": wait, "address": ray_address, "retries": retries}
    options = executor_dict(executor, jobs, given)
    resolve_plan_path(study_dir)  # a wrong path is named before the trainer (and torch) loads
    backend = load_runner(runner, command="run")
    chosen = seed_list(split_values(seeds) or []) if seeds else None
    kwargs: dict[str, Any] = {}
    if options is not None:
        if not _takes_executor(backend.run):
            raise PreregError(f"--executor {executor}: the runner {getattr(backend, 'name', type(backend).__name__)!r} "
                              "takes no executor (its run() has no `executor` parameter); use --executor local")
        kwargs["executor"] = options
    if fresh_process:
        if options is not None:
            raise PreregError(f"--fresh-process is an option of --executor local; --executor {executor} runs one process per run")
        if not _takes_executor(backend.run, "fresh_process"):
            raise PreregError(f"--fresh-process: the runner {getattr(backend, 'name', type(backend).__name__)!r} "
                              "takes no fresh_process (its run() has no `fresh_process` parameter)")
        kwargs["fresh_process"] = True
    if tracker:
        if not _takes_executor(backend.run, "trackers"):
            raise PreregError(f"--tracker: the runner {getattr(backend, 'name', type(backend).__name__)!r} "
                              "takes no trackers (its run() has no `trackers` parameter)")
        kwargs["trackers"] = split_values(tracker)
    if not backend.run(study_dir, stage=stage, configs=split_values(configs), seeds=chosen, n_jobs=jobs, console=err, **kwargs):
        raise typer.Exit(1)
    if stage == "calibration":  # the budget and truncation rules, written as an amendment
        from ..stages.calibration import apply_calibration

        out.print(escape("\n".join(apply_calibration(study_dir).lines())))
