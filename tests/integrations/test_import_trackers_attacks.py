"""Format attacks on the tracker importers, through `prereg import`: junk and damaged files, empty
folders, NaN, infinities and overflow in a key the preset maps, a step logged twice with different
values, a missing key. Each is refused with exit 2 and one line that names the file (and key, step
and value where there is one), never an internal error, a traceback or a numpy repr. The files are
written by the trackers themselves (trackerfiles.py), then damaged where the attack needs it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from importfiles import locked_study
from test_import_core import _prereg
from test_import_trackers import _wandb
from trackerfiles import (
    WANDB_RUNS,
    file_store,
    hf_wandb,
    run_file,
    verl_mlflow,
    verl_tensorboard,
    verl_wandb,
    wandb_batch,
    wandb_folder,
)
from typer.testing import CliRunner

STEP = {"perf/total_num_tokens": 25600, "response_length/mean": 300.0, "prompt_length/mean": 100.0,
        "critic/score/mean": 0.5, "timing_s/gen": 4.0, "timing_s/update_actor": 2.0}

pytestmark = WANDB_RUNS  # reads the W&B runs of wandb_folder


def _steps(n: int = 3, **at: dict) -> dict[int, dict]:
    """verl's per-step metrics; ``at``: ``s<step>={key: value}`` overrides (None drops the key)."""
    out = {}
    for s in range(1, n + 1):
        row = {**STEP, **at.get(f"s{s}", {})}
        out[s] = {k: v for k, v in row.items() if v is not None}
    return out


def _attacks(folder: Path) -> list[dict]:
    trl = [(s, {"completions/mean_length": 20.0 + s}) for s in (1, 2)]
    return [verl_wandb(folder / "nan", "nan0", _steps(s2={"response_length/mean": float("nan")})),
            verl_wandb(folder / "inf", "inf0", _steps(s3={"timing_s/gen": float("inf")})),
            verl_wandb(folder / "big", "big0", _steps(s2={"perf/total_num_tokens": 1e40})),
            verl_wandb(folder / "missing", "missing0", _steps(**{f"s{s}": {"response_length/mean": None} for s in (1, 2, 3)})),
            verl_wandb(folder / "fine", "fine0", _steps(s2={"actor/grad_norm": float("nan")})),
            hf_wandb(folder / "twice", "twice0", [*trl, (2, {"completions/mean_length": 99.0})]),
            hf_wandb(folder / "half", "half0", [*trl, (1.5, {"completions/mean_length": 1.0})])]


wandb_batch("attacks", _attacks)


@pytest.fixture(scope="module")
def wb(tmp_path_factory) -> Path:
    return wandb_folder(tmp_path_factory, "attacks")


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    return locked_study(tmp_path_factory.mktemp("attacks") / "study")


def _damaged(src: Path, dst: Path, *, at: float | None = None, cut: float | None = None) -> Path:
    """A copy of ``src`` with the byte at fraction ``at`` flipped, or cut at fraction ``cut``."""
    data = bytearray(src.read_bytes())
    if at is not None:
        data[int(len(data) * at)] ^= 0xFF
    if cut is not None:
        data = data[:int(len(data) * cut)]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(bytes(data))
    return dst


def _tb(tmp: Path, name: str, steps: dict, *more: dict) -> Path:
    verl_tensorboard(tmp / name, steps)
    for m in more:
        verl_tensorboard(tmp / name, m)
    return tmp / name


def _event_file(folder: Path) -> Path:
    (f,) = folder.glob("events.out.tfevents*")
    return f


def _mlflow(tmp: Path, name: str, steps: dict, resumed: dict | None = None) -> Path:
    rid = verl_mlflow(file_store(tmp / name), steps)
    if resumed:
        verl_mlflow(file_store(tmp / name), resumed, run_id=rid)  # verl attaches to MLFLOW_RUN_ID when resumed
    return tmp / name


# (tool, what, path builder (wb, tmp) -> path or (path, extra args), the one line expected)
CASES = [
    # W&B run files, written by wandb
    ("wandb", "NaN in a mapped key", lambda wb, tmp: wb / "nan",
     r"run-nan0\.wandb \(_step 2\): response_length/mean is nan at step 2: a key the preset maps needs a finite value"),
    ("wandb", "inf in a mapped key", lambda wb, tmp: wb / "inf",
     r"run-inf0\.wandb \(_step 3\): timing_s/gen is inf at step 3"),
    ("wandb", "overflowing counter", lambda wb, tmp: wb / "big",
     r"/big: perf/total_num_tokens: 1e\+40 at step 2 is not a token count \(above 2\*\*53"),
    ("wandb", "missing key", lambda wb, tmp: wb / "missing",
     (r"/missing: response_length/mean is not in the log: the completion tokens per step cannot be counted from "
      r"perf/total_num_tokens, prompt_length/mean alone")),
    ("wandb", "step twice, two values", lambda wb, tmp: (wb / "twice", ["--step-key", "train/global_step", "--preset", "trl"]),
     (r"run-twice0\.wandb \(_step 2\): train/completions/mean_length at step 2 is 99, but .*run-twice0\.wandb \(_step 1\) "
      r"logged 22 for that step")),
    ("wandb", "step not an integer", lambda wb, tmp: (wb / "half", ["--step-key", "train/global_step"]),
     r"run-half0\.wandb \(_step 2\): the step key train/global_step is 1\.5: not a step number"),
    ("wandb", "junk .wandb", lambda wb, tmp: _junk(tmp / "run-x.wandb", b"not a run file at all\x00\x01" * 40),
     r"run-x\.wandb: not a W&B run file \(it does not start with the ':W&B' header\)"),
    ("wandb", "damaged .wandb", lambda wb, tmp: _damaged(run_file(wb / "nan"), tmp / "run-d.wandb", at=0.5),
     r"run-d\.wandb: a damaged record at byte \d+"),
    ("wandb", "truncated .wandb", lambda wb, tmp: _damaged(run_file(wb / "nan"), tmp / "run-t.wandb", cut=0.6),
     r"run-t\.wandb: ends inside a record at byte \d+ \(the run was stopped mid-write\?\)"),
    ("wandb", "format version", lambda wb, tmp: _junk(tmp / "run-v.wandb", b":W&B\xe1\xbe\x01" + bytes(20)),
     r"run-v\.wandb: a W&B run file of format version 1; this reader knows version 0"),
    ("wandb", "Parquet: step twice, two values", lambda wb, tmp: (_parquet_twice(tmp / "h.parquet"), ["--step-key", "train/global_step"]),
     r"h\.parquet \(_step 2\): response_length/mean at step 1 is 301, but .*h\.parquet \(_step 1\) logged 300 for that step"),
    ("wandb", "junk Parquet", lambda wb, tmp: _junk(tmp / "history.parquet", b"PAR1 junk"),
     r"history\.parquet: not a Parquet file \(ArrowInvalid\)"),
    ("wandb", "empty folder", lambda wb, tmp: _folder(tmp / "empty"),
     r"/empty: no W&B run here: no run file \(run-<id>\.wandb\) and no Parquet history"),
    ("wandb", "the UI's CSV", lambda wb, tmp: _junk(tmp / "export.csv", b"Step,x\n1,2\n"),
     r"export\.csv: the W&B web UI's CSV export holds the chart's sampled points"),
    # TensorBoard event files, written by torch's SummaryWriter as verl calls it
    ("tensorboard", "NaN in a mapped key", lambda wb, tmp: _tb(tmp, "nan", _steps(s2={"response_length/mean": float("nan")})),
     r"/nan/events\.out\.tfevents\.\S+: response_length/mean is nan at step 2"),
    ("tensorboard", "float32 overflow", lambda wb, tmp: _tb(tmp, "ovf", _steps(s3={"timing_s/gen": 1e40})),
     r"/ovf/events\.out\.tfevents\.\S+: timing_s/gen is inf at step 3"),
    ("tensorboard", "missing key", lambda wb, tmp: _tb(tmp, "miss", _steps(**{f"s{s}": {"perf/total_num_tokens": None,
                                                                                        "response_length/mean": None} for s in (1, 2, 3)})),
     r"/miss: none of the preset's token keys \(response_length/mean, perf/total_num_tokens\) is in the log; it logs prompt_length/mean, critic/score/mean"),
    ("tensorboard", "step twice, two values", lambda wb, tmp: _tb(tmp, "twice", _steps(), {2: {"timing_s/gen": 7.5}}),
     (r"/twice/events\.out\.tfevents\.\S+: timing_s/gen at step 2 is 7\.5, but .*/twice/events\.out\.tfevents\.\S+ logged 4 "
      r"for that step \(a resumed run\? --resumed")),
    ("tensorboard", "junk event file", lambda wb, tmp: _junk(tmp / "junk" / "events.out.tfevents.1.host", os.urandom(64)),
     r"/junk/events\.out\.tfevents\.1\.host: record 1 fails its checksum \(damaged, or not an event file\)"),
    ("tensorboard", "damaged event file", lambda wb, tmp: _damaged(_event_file(_tb(tmp, "src", _steps())), tmp / "dmg" /
                                                                    "events.out.tfevents.2.host", at=0.5),
     r"/dmg/events\.out\.tfevents\.2\.host: record \d+ fails its checksum"),
    ("tensorboard", "truncated event file", lambda wb, tmp: _damaged(_event_file(_tb(tmp, "src2", _steps())), tmp / "cut" /
                                                                      "events.out.tfevents.3.host", cut=0.5),
     r"/cut/events\.out\.tfevents\.3\.host: ends inside record \d+ \(the writer was stopped mid-write\?\)"),
    ("tensorboard", "empty event file", lambda wb, tmp: _junk(tmp / "e" / "events.out.tfevents.4.host", b""),
     r"/e/events\.out\.tfevents\.4\.host: holds no scalars \(1 event file read\)"),
    ("tensorboard", "empty folder", lambda wb, tmp: _folder(tmp / "empty"),
     r"/empty: no TensorBoard event files \(events\.out\.tfevents\*\)"),
    # MLflow stores, written by mlflow as verl calls it
    ("mlflow", "NaN in a mapped key", lambda wb, tmp: _mlflow(tmp, "nan", _steps(s2={"response_length/mean": float("nan")})),
     r"/metrics/response_length/mean:2: response_length/mean is nan at step 2"),
    ("mlflow", "step twice, two values", lambda wb, tmp: _mlflow(tmp, "twice", _steps(), {2: {"timing_s/gen": 7.5}}),
     r"/metrics/timing_s/gen:4: timing_s/gen at step 2 is 7\.5, but it was logged as 4 before"),
    ("mlflow", "junk metric line", lambda wb, tmp: _junk_metric(_mlflow(tmp, "junkline", _steps())),
     r"/metrics/timing_s/gen:2: expected 'timestamp value step' \(integer, number, integer\), got 'x y z'"),
    ("mlflow", "junk database", lambda wb, tmp: _junk(tmp / "mlflow.db", b"not sqlite" * 100),
     r"mlflow\.db: not an MLflow SQLite store \(file is not a database\)"),
    ("mlflow", "empty folder", lambda wb, tmp: _folder(tmp / "empty"),
     r"/empty: no MLflow run \(a run folder holds meta\.yaml and metrics/\)"),
]


def _junk(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _parquet_twice(path: Path) -> Path:
    """A W&B history export whose rows 1 and 2 (two commits) are both at train/global_step 1, with different values."""
    rows = {s: {"train/global_step": float(g), **STEP, "response_length/mean": v}
            for s, (g, v) in enumerate([(0, 300.0), (1, 300.0), (1, 301.0), (2, 300.0)])}
    return _wandb(path, rows)


def _junk_metric(root: Path) -> Path:
    (f,) = root.glob("*/*/metrics/timing_s/gen")
    lines = f.read_text().splitlines()
    f.write_text("\n".join([lines[0], "x y z", *lines[1:]]) + "\n")
    return root


@pytest.mark.parametrize(("tool", "what", "build", "expected"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_format_attack_is_refused_in_one_line(tool, what, build, expected, wb, study, tmp_path):
    got = build(wb, tmp_path)
    path, extra = got if isinstance(got, tuple) else (got, [])
    args = ["import", tool, str(study), str(path), "-c", "A", "--seed", "0", "--preset", "verl", "--updates-per-step", "2",
            "--completions-per-step", "8", *extra]
    res = CliRunner().invoke(_prereg(), args)
    out = res.output.strip()
    assert res.exit_code == 2, out
    assert len(out.splitlines()) == 1 and out.startswith("error: "), out
    assert re.search(expected, out), out
    assert "internal error" not in out and "Traceback" not in out and "np." not in out, out


def test_nan_in_a_key_the_preset_does_not_map_is_read(wb, study):
    res = CliRunner().invoke(_prereg(), ["import", "wandb", str(study), str(wb / "fine"), "-c", "A", "--seed", "1",
                                         "--preset", "verl", "--updates-per-step", "2"])
    assert res.exit_code == 0, res.output
