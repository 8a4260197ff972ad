"""Live tracking of a run in the tools labs already watch (``prereg run --tracker wandb,mlflow,tensorboard``).

A tracker is a small sink chosen by name from :data:`TRACKERS`, each written with the tool's own
client library (an optional extra). The loop opens a run's sinks once (:meth:`Tracking.open`),
hands them every iteration and evaluation it has just written to the run log
(:meth:`Tracking.log`) and closes them at the end, on failure and on interruption too.

* **Blind** (``prereg_kit.stages.is_blind``: the main stage): a tracker receives only progress and
  compute, as ``prereg status`` and the progress lines show them — the iteration columns of
  ``prereg_kit.runlog.PROGRESS_COLUMNS`` (generated tokens by kind, stage seconds, updates) and
  the run's counters (iterations, tokens, tokens / B, training seconds, evaluations done); never
  an accuracy, a reward or a pass rate. Other stages (smoke, pilot, calibration) also send the
  iteration row's other numbers (reward, group shares, length, loss) and each evaluation set's
  accuracy (:func:`tracked_metrics`).
* **Step**: iterations completed (0: the evaluation before training), also logged as the metric
  ``iteration`` (W&B's x axis).
* **Resume**: the tools' run ids are kept in the run folder's ``tracker.json`` (a working file,
  never sealed), so a resumed run continues its tracker runs: W&B's ``id`` with
  ``resume="allow"``, MLflow's run id, TensorBoard's same log dir with ``purge_step`` (the steps
  logged after the checkpoint the run resumed from are dropped there).
* **Failure**: a sink that fails (a server gone, a full disk) is warned about once through the
  ``prereg_kit.tracking`` logger (into the run's ``train.log``) and dropped; training and the
  run log go on.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from importlib.util import find_spec
from pathlib import Path
from typing import Any, ClassVar, Self

from prereg_kit.errors import MissingExtraError, PreregError, needs_extra
from prereg_kit.runlog import PROGRESS_COLUMNS, TRACKER_RECORD
from prereg_kit.stages import is_blind
from trainer.config import RunSpec
from trainer.core.budget import Counters

log = logging.getLogger("prereg_kit.tracking")
EXIT_CODES = {"complete": 0, "stopped": 130, "failed": 1}  # as the run process exits (trainer.__main__)


def run_name(spec: RunSpec) -> str:
    """The tracker run's name: ``grpo seed 0``, with the stage outside the main one (``grpo seed 0 (pilot)``)."""
    return f"{spec.configuration} seed {spec.seed}" + ("" if spec.stage == "main" else f" ({spec.stage})")


def run_tags(spec: RunSpec) -> dict[str, str]:
    """Who the run is: study, configuration, seed, stage and the plan it was launched under."""
    return {"study": spec.study, "configuration": spec.configuration, "seed": str(spec.seed), "stage": spec.stage,
            "plan_hash": spec.plan_hash}


def tensorboard_dir(spec: RunSpec) -> Path:
    """``<study>/tensorboard/<stage>/<configuration>/seed-<n>``: ``tensorboard --logdir <study>/tensorboard``."""
    return Path(spec.study_dir).resolve() / "tensorboard" / spec.stage / spec.configuration / f"seed-{spec.seed}"


def mlflow_uri(study_dir: str | Path) -> str:
    """``MLFLOW_TRACKING_URI`` where set, else the file store ``<study>/mlruns``."""
    return os.environ.get("MLFLOW_TRACKING_URI") or (Path(study_dir).resolve() / "mlruns").as_uri()


class WandbSink:
    """Weights & Biases: offline into ``<study>/wandb`` (``wandb sync`` uploads it) unless the user
    set ``WANDB_MODE`` / ``WANDB_DIR``; project ``WANDB_PROJECT`` or the study id, one group per
    configuration."""

    package = extra = "wandb"

    def __init__(self, spec: RunSpec, state: dict, first_step: int) -> None:
        import wandb  # an optional extra: imported only when asked for

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or spec.study, id=state.get("id"), resume="allow",
            name=run_name(spec), group=spec.configuration, job_type=spec.stage,
            tags=[spec.stage, spec.configuration[:64], f"seed-{spec.seed}"], config=run_tags(spec),
            dir=None if os.environ.get("WANDB_DIR") else str(Path(spec.study_dir).resolve()),
            mode=None if os.environ.get("WANDB_MODE") else "offline",
            settings=wandb.Settings(console="off"))  # the run's stdout carries its progress lines: never captured
        self.run.define_metric("iteration")
        self.run.define_metric("*", step_metric="iteration")  # a resumed run's repeated steps plot in place
        state["id"] = self.run.id

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=EXIT_CODES[status])


@contextmanager
def _file_store_allowed(uri: str) -> Iterator[None]:
    """MLflow 3 builds a file store (``<study>/mlruns``) only when ``MLFLOW_ALLOW_FILE_STORE`` is
    set; the store is built once per URI and kept, so the variable is set only while it is built."""
    if not uri.startswith("file:") or "MLFLOW_ALLOW_FILE_STORE" in os.environ:
        yield
        return
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        yield
    finally:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)


@contextmanager
def _one_at_a_time(uri: str, study_dir: str | Path) -> Iterator[None]:
    """For a file store, the study's runs look up or create the experiment one at a time (an OS
    lock on ``<study>/.mlruns.lock``): the file store has no unique name, so workers starting
    together each found no experiment and each created one of the same name, splitting the study.
    A tracking server refuses the second name itself (:meth:`MlflowSink._experiment`)."""
    if not uri.startswith("file:"):
        yield
        return
    from filelock import FileLock

    with FileLock(Path(study_dir).resolve() / ".mlruns.lock", timeout=120):
        yield


class MlflowSink:
    """MLflow: to ``MLFLOW_TRACKING_URI``, else the file store ``<study>/mlruns``; experiment
    ``MLFLOW_EXPERIMENT_NAME`` or the study id; tags ``prereg.study`` … ``prereg.plan_hash``."""

    package, extra = "mlflow", "mlflow"
    STATUS: ClassVar[dict[str, str]] = {"complete": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}

    def __init__(self, spec: RunSpec, state: dict, first_step: int) -> None:
        # an optional extra: imported only when asked for
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        uri = mlflow_uri(spec.study_dir)
        with _file_store_allowed(uri), _one_at_a_time(uri, spec.study_dir):
            self.client = MlflowClient(tracking_uri=uri)
            experiment = self._experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME") or spec.study, MlflowException)
        run_id = state.get("run_id") if state.get("tracking_uri") == uri else None
        if run_id:
            try:
                self.client.update_run(run_id, status="RUNNING")
            except MlflowException:  # deleted meanwhile: a new run
                run_id = None
        if not run_id:
            tags = {f"prereg.{k}": v for k, v in run_tags(spec).items()}
            run_id = self.client.create_run(experiment, run_name=run_name(spec), tags=tags).info.run_id
        self.run_id = run_id
        state.update(tracking_uri=uri, run_id=run_id)

    def _experiment(self, name: str, error: type[Exception]) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except error:  # another run of the study created it first
            return self.client.get_experiment_by_name(name).experiment_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        # MLflow takes letters, digits and _-. /: in names only
        self.client.log_batch(self.run_id, metrics=[Metric(re.sub(r"[^\w\-. /:]", "_", k), v, now, step)
                                                    for k, v in metrics.items()])

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, status=self.STATUS[status])


class TensorBoardSink:
    """TensorBoard: event files in ``<study>/tensorboard/<stage>/<configuration>/seed-<n>``
    (torch's ``SummaryWriter``), scalars in float64 so token counts stay exact."""

    package = extra = "tensorboard"

    def __init__(self, spec: RunSpec, state: dict, first_step: int) -> None:
        # needs the tensorboard extra: imported only when asked for
        from torch.utils.tensorboard import SummaryWriter

        folder = tensorboard_dir(spec)
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=first_step)
        state["log_dir"] = str(folder)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step, new_style=True, double_precision=True)
        self.writer.flush()  # watched live

    def close(self, status: str) -> None:
        self.writer.close()


TRACKERS: dict[str, type] = {"wandb": WandbSink, "mlflow": MlflowSink, "tensorboard": TensorBoardSink}


def check_trackers(names: Sequence[str] | None) -> list[str]:
    """The trackers asked for, known and installed (order kept, each once); a name that is not in
    :data:`TRACKERS`, or whose package is missing, is a one-line :class:`PreregError`."""
    out: list[str] = []
    for given in names or []:
        name = given.strip().lower()
        if name not in TRACKERS:
            raise PreregError(f"--tracker {given}: unknown tracker (have: {', '.join(TRACKERS)})")
        sink = TRACKERS[name]
        if find_spec(sink.package) is None:
            raise MissingExtraError(needs_extra(f"--tracker {name}", sink.package, sink.extra))
        if name not in out:
            out.append(name)
    return out


def where_tracked(names: Sequence[str], study_dir: str | Path, stage: str) -> str:
    """One line for the launcher: where each tracker writes, and whether the stage is blind."""
    study = Path(study_dir).resolve()
    wandb_dir = Path(os.environ["WANDB_DIR"]) if os.environ.get("WANDB_DIR") else study
    places = {"wandb": f"wandb ({os.environ.get('WANDB_MODE') or 'offline'}, {wandb_dir / 'wandb'})",
              "mlflow": f"mlflow ({mlflow_uri(study)})", "tensorboard": f"tensorboard ({study / 'tensorboard' / stage})"}
    blind = "blind: progress and compute only" if is_blind(stage) else "with rewards and accuracy"
    return f"tracking each run live in {', '.join(places[n] for n in names)}; {blind}"


def tracked_metrics(spec: RunSpec, counters: Counters, row: Mapping[str, Any] | None = None,
                    accuracies: Mapping[str, float] | None = None) -> dict[str, float]:
    """What the trackers receive when an iteration row or an evaluation has been logged: the
    counters (``iteration`` completed, ``tokens``, ``b_multiple`` = tokens / B or iterations / N,
    ``train_seconds``, ``updates``, ``evaluations`` done), the row's numbers under their run-log
    names (in a blind stage only those of ``PROGRESS_COLUMNS``) and, outside a blind stage,
    ``accuracy/<evaluation set>``."""
    c, blind = counters, is_blind(spec.stage)
    out = {"iteration": float(c.iteration), "tokens": float(c.total_tokens), "train_seconds": float(c.train_seconds),
           "updates": float(c.updates), "evaluations": float(c.eval_index),
           "b_multiple": c.total_tokens / spec.budget_tokens if spec.budget_tokens else c.iteration / (spec.budget_iterations or 1)}
    for k, v in (row or {}).items():
        if k == "iteration" or (blind and k not in PROGRESS_COLUMNS):  # the row's iteration is 0-based
            continue
        if isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v):
            out[k] = float(v)
    if not blind:
        out.update({f"accuracy/{name}": float(a) for name, a in (accuracies or {}).items()})
    return out


def read_state(run_dir: str | Path) -> dict[str, dict]:
    """The trackers' run ids kept in the run folder (empty when none or unreadable)."""
    try:
        state = json.loads((Path(run_dir) / TRACKER_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(run_dir: str | Path, state: dict) -> None:
    path = Path(run_dir) / TRACKER_RECORD
    tmp = path.with_name(f"{TRACKER_RECORD}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


class Tracking:
    """A run's open trackers (none: every call does nothing). A context manager: leaving it closes
    them as complete, stopped (an interruption) or failed."""

    def __init__(self, spec: RunSpec | None = None, sinks: Mapping[str, Any] | None = None) -> None:
        self.spec = spec
        self.sinks = dict(sinks or {})

    @classmethod
    def open(cls, spec: RunSpec, counters: Counters, trackers: Mapping[str, type] = TRACKERS) -> Tracking:
        """Start (or, for a resumed run, continue) the tracker runs ``spec.trackers`` names. A run
        resumed from a checkpoint logs again from the iteration after it (``first_step``)."""
        tracking = cls(spec)
        if not spec.trackers:
            return tracking
        state = read_state(spec.run_dir)
        first_step = counters.iteration + 1 if counters.eval_index else 0
        for name in spec.trackers:
            try:
                tracking.sinks[name] = trackers[name](spec, state.setdefault(name, {}), first_step)
            except Exception as e:  # noqa: BLE001  (the tool's own errors: the run goes on without it)
                tracking._dropped(name, "could not start", e)
        try:
            _write_state(spec.run_dir, state)
        except OSError as e:
            log.warning("tracking: %s not written (%s): a resumed run starts new tracker runs",
                        Path(spec.run_dir) / TRACKER_RECORD, e)
        return tracking

    def _dropped(self, name: str, what: str, e: BaseException) -> None:
        sink = self.sinks.pop(name, None)
        first = (str(e).strip().splitlines() or [""])[0][:300]
        log.warning("tracker %s %s (%s: %s); training goes on without it, the run log is complete",
                    name, what, type(e).__name__, first)
        if sink is not None:
            with suppress(Exception):  # already warned about
                sink.close("failed")

    def log(self, counters: Counters, row: Mapping[str, Any] | None = None,
            accuracies: Mapping[str, float] | None = None) -> None:
        """Send what was just written to the run log (an iteration row, an evaluation, or both)."""
        if not self.sinks:
            return
        metrics = tracked_metrics(self.spec, counters, row, accuracies)
        for name, sink in list(self.sinks.items()):
            try:
                sink.log(metrics, counters.iteration)
            except Exception as e:  # noqa: BLE001
                self._dropped(name, f"failed at iteration {counters.iteration}", e)

    def close(self, status: str = "complete") -> None:
        """End every tracker run as ``complete``, ``stopped`` or ``failed``."""
        for name, sink in list(self.sinks.items()):
            try:
                sink.close(status)
            except Exception as e:  # noqa: BLE001
                self.sinks.pop(name, None)
                log.warning("tracker %s did not close (%s: %s)", name, type(e).__name__, str(e)[:300])
        self.sinks.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close("complete" if exc_type is None else "stopped" if issubclass(exc_type, KeyboardInterrupt) else "failed")


__all__ = ["TRACKERS", "MlflowSink", "TensorBoardSink", "Tracking", "WandbSink", "check_trackers", "read_state",
           "run_name", "run_tags", "tensorboard_dir", "tracked_metrics", "where_tracked"]
