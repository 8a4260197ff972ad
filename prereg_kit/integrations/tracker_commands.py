"""``prereg import tensorboard|mlflow|wandb``: a tracker's export → a run folder of the study.

Each command reads the export through a key preset (trackers.PRESETS, or a JSON mapping file),
adds per-problem evaluations from ``--evaluations`` when given, and writes the run with the import
core (``write_imported_run``: plan checks, never overwriting, sealing main runs). Without
``--evaluations`` the run has no evaluations: the analysis then refuses the run by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..cli.base import handles_errors
from ..cli.jsonout import JsonOpt
from .tracker_presets import PRESETS, TrackerError

Study = Annotated[Path, typer.Argument(help="the study folder (plan.toml, plan.lock, runs/)")]
Configuration = Annotated[str, typer.Option("--configuration", "-c", help="the plan's configuration this run trained")]
Seed = Annotated[int, typer.Option("--seed", help="the plan's seed this run used")]
Preset = Annotated[str, typer.Option("--preset", help=f"key preset ({', '.join(PRESETS)}) or a JSON file: our column -> logged key")]
Trainer = Annotated[Optional[str], typer.Option("--trainer", help="what trained the run (default: the preset's name)")]
Evals = Annotated[Optional[Path], typer.Option("--evaluations", help="per-problem evaluation results, scored (.jsonl/.parquet)")]
PerStep = Annotated[Optional[int], typer.Option("--completions-per-step", help="completions generated per step (prompts x generations)")]
Updates = Annotated[Optional[int], typer.Option("--updates-per-step", help="optimizer updates per step, when the log does not count them")]
Wallclock = Annotated[bool, typer.Option("--wallclock", help="time steps by the tracker's clock (includes evaluation and checkpoint time)")]
Prefix = Annotated[str, typer.Option("--prefix", help="strip this prefix from logged keys (transformers' callbacks log 'train/<key>')")]
Resumed = Annotated[bool, typer.Option("--resumed", help="a run resumed from a checkpoint: a later file that re-logs steps "
                                      "replaces the earlier files' records from its first step on (else different values are refused)")]
Stage = Annotated[str, typer.Option("--stage", help="the plan stage of the run")]
Device = Annotated[str, typer.Option("--device", help="what it trained on, recorded as meta.device: cuda:<GPU name as torch "
                                     "names it> (e.g. \"cuda:NVIDIA H100 80GB HBM3\"), cpu, \"cpu (<CPU model>)\" or unknown; "
                                     "contrasts read at matched time need one device type")]


def _preset(preset: str) -> str | dict[str, str]:
    if preset in PRESETS:
        return preset
    p = Path(preset)
    if p.suffix == ".json" and p.is_file():
        mapping = json.loads(p.read_text())
        if not isinstance(mapping, dict) or not all(isinstance(v, str) for v in mapping.values()):
            raise TrackerError(f"{p}: a preset file is a JSON object: our column -> the tool's logged key")
        return mapping
    raise TrackerError(f"--preset {preset!r}: not one of {', '.join(PRESETS)} nor a .json mapping file")


def _check_study(study_dir: Path, configuration: str, seed: int, stage: str) -> None:
    """The study path, configuration and seed are checked before the export is read: a wrong study is named first."""
    from .importing import check_target  # pandas loads only when a command runs

    check_target(study_dir, configuration, seed, stage)


def _write(study_dir: Path, configuration: str, seed: int, run, stage: str, device: str, as_json: bool = False) -> None:
    from .command import finish  # the import core writes and seals

    run.device = device  # trackers do not log the device; the user states it (time contrasts compare it)
    run.start_source = f"the {run.importer} log's own clock"  # trackers stamp the run; there is no --started-at
    finish(study_dir, configuration, seed, run, stage, as_json)


def tensorboard(study_dir: Study, path: Annotated[Path, typer.Argument(help="a TensorBoard run folder or event file")],
                configuration: Configuration, seed: Seed, preset: Preset, trainer: Trainer = None, evals: Evals = None,
                completions_per_step: PerStep = None, updates_per_step: Updates = None, wallclock: Wallclock = False,
                prefix: Prefix = "", resumed: Resumed = False, stage: Stage = "main", device: Device = "unknown",
                as_json: JsonOpt = False) -> None:
    """Import a run from TensorBoard event files (float32: cumulative token counters refused)."""
    _check_study(study_dir, configuration, seed, stage)
    from .tensorboard import import_tensorboard

    p = _preset(preset)
    run = import_tensorboard(path, preset=p, trainer=trainer or (preset if p == preset else "custom"), prefix=prefix,
                             evals=evals, completions_per_step=completions_per_step,
                             updates_per_step=updates_per_step, wallclock=wallclock, resumed=resumed)
    _write(study_dir, configuration, seed, run, stage, device, as_json)


def mlflow(study_dir: Study, path: Annotated[Path, typer.Argument(help="an MLflow run folder, file store (mlruns) or mlflow.db")],
           configuration: Configuration, seed: Seed, preset: Preset, trainer: Trainer = None,
           run_id: Annotated[Optional[str], typer.Option("--run-id", help="the MLflow run, when the store holds several")] = None,
           evals: Evals = None, completions_per_step: PerStep = None, updates_per_step: Updates = None,
           wallclock: Wallclock = False, prefix: Prefix = "", stage: Stage = "main", device: Device = "unknown",
                as_json: JsonOpt = False) -> None:
    """Import a run from an MLflow store (file store or SQLite; '_at_' read back as '@')."""
    _check_study(study_dir, configuration, seed, stage)
    from .mlflow import import_mlflow

    p = _preset(preset)
    run = import_mlflow(path, preset=p, trainer=trainer or (preset if p == preset else "custom"), run_id=run_id,
                        prefix=prefix, evals=evals, completions_per_step=completions_per_step,
                        updates_per_step=updates_per_step, wallclock=wallclock)
    _write(study_dir, configuration, seed, run, stage, device, as_json)


def wandb(study_dir: Study,
          path: Annotated[Path, typer.Argument(help="a W&B run: its run-<id>.wandb file, its folder (wandb/offline-run-...), "
                                                    "the wandb/ folder of one run, or its Parquet history (not the UI's CSV)")],
          configuration: Configuration, seed: Seed, preset: Preset, trainer: Trainer = None,
          step_key: Annotated[str, typer.Option("--step-key", help="the step axis column")] = "_step",
          evals: Evals = None, completions_per_step: PerStep = None, updates_per_step: Updates = None,
          wallclock: Wallclock = False, prefix: Prefix = "", resumed: Resumed = False, stage: Stage = "main",
          device: Device = "unknown", as_json: JsonOpt = False) -> None:
    """Import a run from W&B: its run file (offline or online, read with wandb's protobufs) or its Parquet history."""
    _check_study(study_dir, configuration, seed, stage)
    from .wandb import import_wandb

    p = _preset(preset)
    run = import_wandb(path, preset=p, trainer=trainer or (preset if p == preset else "custom"), step_key=step_key,
                       prefix=prefix, evals=evals, completions_per_step=completions_per_step,
                       updates_per_step=updates_per_step, wallclock=wallclock, resumed=resumed)
    _write(study_dir, configuration, seed, run, stage, device, as_json)


COMMANDS = {"tensorboard": handles_errors(tensorboard), "mlflow": handles_errors(mlflow), "wandb": handles_errors(wandb)}


def register(app: typer.Typer) -> None:
    """Add the tracker subcommands to ``prereg import``'s typer app."""
    for name, fn in COMMANDS.items():
        app.command(name)(fn)
