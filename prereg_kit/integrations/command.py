"""``prereg import <tool> STUDY_DIR PATH --configuration C --seed N``: another trainer's run into a study.

Each subcommand reads one run with its importer (an :class:`~.importing.ImportedRun`) and writes
it with :func:`~.importing.write_imported_run` (locked plan, planned configuration and seed, never
over an existing run, sealed). The ``prereg`` command adds this app through the entry-point group
``prereg_kit.commands`` (``import = "prereg_kit.integrations.command:app"``).

Registration point: :data:`COMMANDS` maps a subcommand name to its function; other modules listed
in :data:`COMMAND_MODULES` (the trackers' importers) add theirs through their own ``COMMANDS``
dict, so this file does not change when they land. Imports of pandas and the importers stay inside
the functions, so that ``prereg --help`` stays fast.
"""

from __future__ import annotations

import importlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Callable

import typer

from ..cli.base import handles_errors
from ..cli.jsonout import JsonOpt
from ..errors import PreregError

app = typer.Typer(name="import", help="Import a run another trainer wrote (verl, OpenRLHF, TRL, trackers) into a locked study.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

# Modules that add subcommands through their own ``COMMANDS`` dict (one missing is skipped).
COMMAND_MODULES = ("prereg_kit.integrations.tracker_commands", "prereg_kit.integrations.evaluations_file")

Study = Annotated[Path, typer.Argument(help="Study folder (plan.toml, locked for main-stage runs).")]
Configuration = Annotated[str, typer.Option("--configuration", "-c", help="The plan's configuration this run trained.")]
Seed = Annotated[int, typer.Option("--seed", "-s", help="The plan's seed this run used.")]
Stage = Annotated[str, typer.Option("--stage", help="Plan stage (main runs need a locked plan and are sealed).")]
StartedAt = Annotated[str | None, typer.Option("--started-at", help="UTC start of training, e.g. 2026-01-31T12:00:00Z "
                                                                   "(the tools do not log it; the audit checks it).")]
EndedAt = Annotated[str | None, typer.Option("--ended-at", help="UTC end of training (optional).")]
EvalSet = Annotated[str | None, typer.Option("--eval-set", help="The plan's evaluation set the evaluation outputs belong to.")]
EvalSeed = Annotated[int | None, typer.Option("--eval-seed", help="Sampling seed of the evaluations, if known (default: not known).")]
Trainer = Annotated[str | None, typer.Option("--trainer", help="Name recorded as meta.trainer (default: the tool's).")]
Device = Annotated[str, typer.Option("--device", help="What it trained on, recorded as meta.device: cuda:<GPU name as torch "
                                     "names it> (e.g. \"cuda:NVIDIA H100 80GB HBM3\"), cpu, \"cpu (<CPU model>)\" or unknown; "
                                     "contrasts read at matched time need one device type.")]


def parse_time(value: str | None, option: str) -> datetime | None:
    """An ISO time with a UTC offset (``Z`` accepted); a time without one is refused."""
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise PreregError(f"{option}: {value!r} is not an ISO time such as 2026-01-31T12:00:00Z") from None
    if t.tzinfo is None:
        raise PreregError(f"{option}: {value!r} has no UTC offset (add Z or +00:00)")
    return t.astimezone(timezone.utc)


def check_study(study_dir: Path, configuration: str, seed: int, stage: str) -> None:
    """Refuse a study path, configuration or seed that cannot take the run before any file of the
    other trainer is read: the path the user typed and its cause come first."""
    from .importing import check_target

    check_target(study_dir, configuration, seed, stage)


def finish(study_dir: Path, configuration: str, seed: int, run: Any, stage: str, as_json: bool = False) -> None:
    """Write an imported run and say where it went: one line and the importer's notes, or with
    ``as_json`` one JSON document (:func:`~.importing.import_summary`)."""
    from ..cli.base import err, out
    from ..cli.jsonout import print_json
    from .importing import import_summary, write_imported_run

    folder = write_imported_run(study_dir, configuration, seed, run, stage=stage)
    doc = import_summary(folder, run, configuration=configuration, seed=seed, stage=stage)
    if as_json:
        print_json(doc)
        return
    out.print(f"imported {run.importer} run -> {folder} ({doc['iterations']} iterations, {doc['tokens']} generated tokens, "
              f"{doc['evaluations']} evaluations{', sealed' if doc['sealed'] else ''})", soft_wrap=True)
    if not doc["evaluations"]:
        err.print("note: no evaluations: the analysis refuses this run until per-problem results are imported "
                  "(--evaluations; `prereg import evaluations` builds them from the trainer's outputs)", soft_wrap=True)
    for note in doc["notes"]:
        err.print(f"note: {note}", soft_wrap=True)


@handles_errors
def verl_cmd(study_dir: Study,
             path: Annotated[list[Path], typer.Argument(help="verl's file-logger JSONL ($VERL_FILE_LOGGER_PATH); a resumed run: "
                                                             "each attempt's file, in the order the attempts ran.")],
             configuration: Configuration, seed: Seed,
             config: Annotated[Path | None, typer.Option("--config", help="verl's resolved config (.hydra/config.yaml or JSON).")] = None,
             validation_dir: Annotated[Path | None, typer.Option("--validation-dir", help="trainer.validation_data_dir (<step>.jsonl dumps).")] = None,
             responses_per_step: Annotated[int | None, typer.Option("--responses-per-step", min=1, help="Responses generated a step (default from --config).")] = None,
             updates_per_step: Annotated[int | None, typer.Option("--updates-per-step", min=1, help="Optimizer steps a step (default from --config).")] = None,
             eval_set: EvalSet = None, eval_seed: EvalSeed = None, started_at: StartedAt = None, ended_at: EndedAt = None,
             trainer: Trainer = None, device: Device = "unknown", stage: Stage = "main", as_json: JsonOpt = False) -> None:
    """verl: the file logger's JSONL (each attempt's, for a resumed run), its config and validation dumps (re-scored with
    our verifiers)."""
    check_study(study_dir, configuration, seed, stage)
    from .verl import import_verl

    run = import_verl(path, config=config, validation_dir=validation_dir, responses_per_step=responses_per_step,
                      updates_per_step=updates_per_step, eval_set=eval_set, eval_seed=eval_seed,
                      started_at=parse_time(started_at, "--started-at"), ended_at=parse_time(ended_at, "--ended-at"),
                      trainer=trainer or "verl", device=device)
    finish(study_dir, configuration, seed, run, stage, as_json)


@handles_errors
def openrlhf_cmd(study_dir: Study, path: Annotated[Path, typer.Argument(help="Per-step metrics as JSON lines (OpenRLHF's logged keys).")],
                 configuration: Configuration, seed: Seed,
                 responses_per_step: Annotated[int | None, typer.Option("--responses-per-step", min=1, help="Samples per step when the history does not log rollout/num_samples (rollout.batch_size x rollout.n_samples_per_prompt).")] = None,
                 args: Annotated[Path | None, typer.Option("--args", help="OpenRLHF's arguments as JSON (0.11: rollout.batch_size, rollout.n_samples_per_prompt, train.batch_size, train.max_epochs; older flat names too).")] = None,
                 updates_per_step: Annotated[int | None, typer.Option("--updates-per-step", min=1, help="Optimizer steps a logged step.")] = None,
                 key: Annotated[list[str] | None, typer.Option("--key", help="Override the preset: column=logged_key (repeatable).")] = None,
                 evaluations: Annotated[Path | None, typer.Option("--evaluations", help="Evaluation outputs as JSON lines: step, input, output, answer.")] = None,
                 eval_set: EvalSet = None, eval_seed: EvalSeed = None, started_at: StartedAt = None, ended_at: EndedAt = None,
                 trainer: Trainer = None, device: Device = "unknown", stage: Stage = "main", as_json: JsonOpt = False) -> None:
    """OpenRLHF: per-step metrics (JSON lines) mapped through the OpenRLHF preset."""
    check_study(study_dir, configuration, seed, stage)
    from .openrlhf import import_openrlhf

    run = import_openrlhf(path, responses_per_step=responses_per_step, args=args, updates_per_step=updates_per_step,
                          keys=dict(_pair(k, "--key") for k in key or []), evaluations=evaluations, eval_set=eval_set,
                          eval_seed=eval_seed, started_at=parse_time(started_at, "--started-at"),
                          ended_at=parse_time(ended_at, "--ended-at"), trainer=trainer or "openrlhf", device=device)
    finish(study_dir, configuration, seed, run, stage, as_json)


@handles_errors
def trl_cmd(study_dir: Study, path: Annotated[Path, typer.Argument(help="TRL's trainer_state.json (or the checkpoint folder holding it).")],
            configuration: Configuration, seed: Seed,
            completions_per_step: Annotated[int | None, typer.Option("--completions-per-step", min=1, help="Completions generated per optimizer step (global batch).")] = None,
            args: Annotated[Path | None, typer.Option("--args", help="GRPOConfig as JSON (per_device_train_batch_size, gradient_accumulation_steps, world_size).")] = None,
            evaluations: Annotated[Path | None, typer.Option("--evaluations", help="Evaluation outputs as JSON lines: step, input, output, answer.")] = None,
            eval_set: EvalSet = None, eval_seed: EvalSeed = None, started_at: StartedAt = None, ended_at: EndedAt = None,
            trainer: Trainer = None, device: Device = "unknown", stage: Stage = "main", as_json: JsonOpt = False) -> None:
    """TRL's trainer_state.json (log_history every step); for a live run use PreregCallback instead."""
    check_study(study_dir, configuration, seed, stage)
    from .trl_state import import_trl_state

    run = import_trl_state(path, completions_per_step=completions_per_step, args=args, evaluations=evaluations,
                           eval_set=eval_set, eval_seed=eval_seed, started_at=parse_time(started_at, "--started-at"),
                           ended_at=parse_time(ended_at, "--ended-at"), trainer=trainer or "trl", device=device)
    finish(study_dir, configuration, seed, run, stage, as_json)


def _pair(text: str, option: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise PreregError(f"{option}: expected COLUMN=KEY, got {text!r}")
    return name.strip(), value.strip()


COMMANDS: dict[str, Callable[..., None]] = {"verl": verl_cmd, "openrlhf": openrlhf_cmd, "trl": trl_cmd}


def register(target: typer.Typer = app) -> typer.Typer:
    """Add :data:`COMMANDS` and those of :data:`COMMAND_MODULES` (where installed) to ``target``."""
    commands = dict(COMMANDS)
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            continue
        commands.update(getattr(mod, "COMMANDS", {}))
    for name, fn in commands.items():
        target.command(name)(fn)
    return target


register()

__all__ = ["COMMANDS", "COMMAND_MODULES", "app", "check_study", "finish", "parse_time", "register"]
