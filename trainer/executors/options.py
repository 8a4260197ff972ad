"""The options of ``prereg run --executor slurm|ray``, checked before anything is submitted.

Two rules of the studies' design hold on every executor:

* a main-stage or calibration run never shares a GPU with another run (fractional GPUs are for the
  smoke and pilot stages only): the matched-compute readings compare runs by tokens *and* seconds,
  and a shared device makes one run's seconds depend on its neighbour (dense-rewards paper §2.3,
  C.1: every run on its own device of one type);
* ``gpus_per_run = 0`` means a CPU run.

The command line hands these options over as a plain dict (``{"name": "slurm", …}``) so that the
core never imports this module; :func:`executor_options` turns the dict into one of the models.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prereg_kit.errors import PreregError

SHARED_GPU_STAGES = ("smoke", "pilot")  # the stages whose runs may share a GPU

# sbatch flags the Slurm executor sets itself from its own options (or submitit does): giving
# them again through --sbatch would silently fight the named option
_OWN_FLAGS = {"array": "--array-parallelism", "partition": "--partition", "account": "--account",
              "gpus-per-node": "--gpus-per-run", "gres": "--gpus-per-run", "gpus": "--gpus-per-run",
              "cpus-per-task": "--cpus-per-run", "mem": "--mem-gb", "time": "--time-min",
              "constraint": "--constraint", "signal": "(set by the executor)", "output": "(set by the executor)",
              "error": "(set by the executor)", "requeue": "(set by the executor)"}
_FLAG = re.compile(r"^[a-z][a-z0-9-]*$")


class SlurmOptions(BaseModel):
    """``--executor slurm``: one submitit job array per study."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["slurm"] = "slurm"
    partition: str | None = None
    account: str | None = None
    gpus_per_run: int = Field(1, ge=0, description="whole GPUs per array task; 0: CPU")
    cpus_per_run: int | None = Field(None, ge=1)
    mem_gb: float | None = Field(None, gt=0)
    time_min: int = Field(180, ge=1, description="time limit of one attempt; a timed-out run requeues and resumes")
    array_parallelism: int = Field(256, ge=1)
    constraint: str | None = None
    sbatch: dict[str, str | bool] = Field(default_factory=dict)
    backend: Literal["slurm", "local"] = "slurm"
    wait: bool = False
    signal_delay_s: int = Field(120, ge=10, description="USR2 this long before the time limit: time to stop and requeue")

    @field_validator("sbatch", mode="before")
    @classmethod
    def _flags(cls, v: Any) -> dict[str, str | bool]:
        pairs = list(v.items()) if isinstance(v, dict) else [(s.split("=", 1) + [True])[:2] for s in (v or [])]
        out: dict[str, str | bool] = {}
        for key, value in pairs:
            key = str(key).strip().lstrip("-").replace("_", "-")
            if not _FLAG.match(key):
                raise ValueError(f"{key!r} is not an sbatch flag name (KEY=VALUE, e.g. --sbatch qos=high)")
            if key in _OWN_FLAGS:
                raise ValueError(f"{key!r} is set by the executor: use {_OWN_FLAGS[key]}")
            out[key] = value
        return out


class RayOptions(BaseModel):
    """``--executor ray``: one Ray task per run."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["ray"] = "ray"
    address: str | None = Field(None, description="cluster address ('auto', 'ray://host:10001'); none: a local cluster")
    gpus_per_run: float = Field(1.0, ge=0)
    cpus_per_run: float = Field(1.0, gt=0)
    retries: int = Field(3, ge=0, description="Ray's max_retries: attempts after a lost worker")


def check_gpu_share(gpus: float, stage: str, where: str = "--gpus-per-run") -> None:
    """Refuse a fractional GPU share outside the smoke and pilot stages (0: CPU)."""
    if gpus != int(gpus) and stage not in SHARED_GPU_STAGES:
        raise PreregError(f"{where} {gpus:g}: {stage}-stage runs never share a GPU (a shared device makes "
                          f"a run's seconds depend on its neighbour); fractional GPUs only for the "
                          f"{' and '.join(SHARED_GPU_STAGES)} stages; 0 means CPU")


def check_local_jobs(n_jobs: int | None, n_devices: int, stage: str) -> None:
    """The local launcher's form of the rule: with CUDA devices, no more runs at once than devices."""
    if n_devices and n_jobs and n_jobs > n_devices and stage not in SHARED_GPU_STAGES:
        raise PreregError(f"--jobs {n_jobs} > {n_devices} CUDA device(s): {stage}-stage runs never share a GPU; "
                          f"use --jobs {n_devices} or fewer (sharing only for the {' and '.join(SHARED_GPU_STAGES)} stages)")


def executor_options(executor: dict | None, stage: str) -> SlurmOptions | RayOptions | None:
    """The checked options of an executor dict from the command line (None: the local launcher)."""
    if executor is None or executor.get("name", "local") == "local":
        return None
    name = executor.get("name")
    model = {"slurm": SlurmOptions, "ray": RayOptions}.get(name)
    if model is None:
        raise PreregError(f"--executor {name!r}: unknown executor (have: local, slurm, ray)")
    given = {k: v for k, v in executor.items() if v is not None}
    if "gpus_per_run" in given:
        check_gpu_share(float(given["gpus_per_run"]), stage)
    try:
        return model(**given)
    except ValidationError as e:
        first = e.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else "options"
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = f"not an option of --executor {name}"
        raise PreregError(f"--executor {name}: --{key.replace('_', '-')}: {msg}") from None


__all__ = ["SHARED_GPU_STAGES", "RayOptions", "SlurmOptions", "check_gpu_share", "check_local_jobs", "executor_options"]
