"""``prereg status``: where every run of a study's stage stands, read from the study folder only.

For each run the plan names (its configurations × seeds, dense-rewards paper §2.3, C.1) and each
run folder found that the plan does not name: its state, the generated tokens against the run's
stop point (k·B tokens, or k·N iterations for an iteration budget — the same stop the launcher
hands the trainer), iteration, evaluations done, training seconds (the five stage times summed
over the iteration rows, Appendix D) and wall-clock time, an estimate of the time left, the
executor job behind it (``executor.json``), the writer holding it (lock and lease) and its device.

Nothing here writes: the plan is read without its lock chain, the run logs without their
writer's lock (``run_busy`` only probes it). Reading is cheap on long runs: iteration rows carry
per-iteration tokens and seconds, so they are summed in one pass of Arrow's JSON reader over the
needed columns, and a :class:`StatusCache` keeps the sums and the byte offset between refreshes
so ``--watch`` reads only what was appended; evaluation rows carry cumulative values, so only
the last complete line is read (the tail of the file). A torn last line — one being written — is
left for the next refresh, never an error.

Blind (dense-rewards paper §2.3: the analysis is fixed before the runs are looked at): during the
main stage no accuracy, reward or contrast is read or shown; smoke, pilot and calibration runs
show the last evaluation's accuracy.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from ..errors import PreregError
from ..plan import load_plan
from ..runlog import (
    EVALS,
    ITERATIONS,
    META_FILE,
    PROGRESS_COLUMNS,
    STAGE_SECONDS,
    STEP_SECONDS,
    TOKEN_KINDS,
    RunLogError,
    read_job_record,
    read_meta,
    run_busy,
    run_dir,
    utc_now,
)
from ..runlog.writerlock import heartbeat_age, read_note
from ..stages import is_blind
from ..stages.calibration import CALIBRATION_ITERATIONS
from .audit import device_type
from .jobs import planned_runs

STATES = ("pending", "queued", "running", "stopped", "failed", "complete")
BLIND_NOTE = "blind: accuracy and contrasts stay hidden until `prereg analyze`"
_ITER_COLS = PROGRESS_COLUMNS  # all that is read of the iteration rows: a blind stage shows no more
_STOPPED_EXIT = (130, 3)  # stopped by SIGTERM; found complete by another process


@dataclass
class _Tally:
    """Sums over the iteration rows read so far, and where reading stopped."""

    offset: int = 0
    rows: int = 0
    iteration: int = -1
    tokens: int = 0
    seconds: float = 0.0
    ident: tuple = ()


@dataclass
class StatusCache:
    """What one ``prereg status --watch`` keeps between refreshes: per iterations file, the sums
    and the byte offset read so far (a file that shrank — a resume truncated it — is re-read)."""

    tallies: dict[str, _Tally] = field(default_factory=dict)


@dataclass
class RunStatus:
    """One run's row of ``prereg status``. ``stop`` and ``done`` are in ``unit`` (tokens, or
    iterations for an iteration budget); ``budget`` is B on that axis."""

    configuration: str
    seed: int
    stage: str
    folder: str
    state: str
    in_plan: bool = True
    unit: str = "tokens"
    tokens: int = 0
    iteration: int = 0
    done: float = 0
    budget: float | None = None
    stop: float | None = None
    fraction: float | None = None
    evaluations: int = 0
    train_s: float = 0.0
    wall_s: float | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None  # the time the rate is taken over (wall, or training once resumed)
    executor: str = ""
    job_id: str = ""
    attempts: int = 0
    holder: str = ""
    heartbeat_age_s: float | None = None
    device: str = ""
    accuracy: dict[str, float] | None = None  # never filled for the main stage (blind)
    note: str = ""

    @property
    def b_multiple(self) -> float | None:
        """Progress as a multiple of B (tokens / B, or iterations / N)."""
        return self.done / self.budget if self.budget else None


@dataclass
class StudyStatus:
    """``prereg status`` of one stage: a row per run and the totals."""

    study: str
    stage: str
    plan: str
    runs: list[RunStatus]
    parallel: int | None = None
    at: str = field(default_factory=lambda: utc_now().isoformat())

    @property
    def blind(self) -> bool:
        return is_blind(self.stage)

    @property
    def finished(self) -> bool:
        """Every planned run is complete or failed (nothing left to watch)."""
        return all(r.state in ("complete", "failed") for r in self.runs if r.in_plan)

    def totals(self) -> dict[str, Any]:
        """Runs per state; over the planned runs (in the stage's unit when they share one) the
        tokens (or iterations) ``done`` — as trained: a run's last iteration may end past its
        stop — against ``total``, their stops k·B summed, and ``fraction``, each run's progress
        counted up to its stop (so never above 1, and 1 only when every run reached its stop);
        the study's time left at ``parallel`` runs at once (default: those running now, at least one)."""
        planned = [r for r in self.runs if r.in_plan]
        counts = {s: sum(r.state == s for r in self.runs) for s in STATES}
        units = {r.unit for r in planned}
        unit = units.pop() if len(units) == 1 else None
        done = sum(r.done for r in planned) if unit else None
        total = sum(r.stop or 0 for r in planned) if unit else None
        fraction = sum(min(r.done, r.stop) for r in planned if r.stop) / total if unit and total else None
        # a run without a rate of its own is costed at the mean full length of those that have one
        full = [r.elapsed_s + r.eta_s for r in planned if r.eta_s is not None and r.elapsed_s and r.state != "complete"]
        full += [r.elapsed_s for r in planned if r.state == "complete" and r.elapsed_s]
        mean_full = sum(full) / len(full) if full else None
        left, known = 0.0, True
        for r in planned:
            if r.state in ("complete", "failed"):
                continue
            if r.eta_s is not None:
                left += r.eta_s
            elif mean_full is not None:
                left += mean_full * (1 - (r.fraction or 0.0))
            else:
                known = False
        n = self.parallel or max(1, counts["running"])
        return {"runs": len(planned), "not_in_plan": len(self.runs) - len(planned), **counts, "unit": unit,
                "done": done, "total": total, "fraction": fraction, "parallel": n,
                "eta_s": (left / n if known else None) if any(r.state not in ("complete", "failed") for r in planned) else 0.0}

    def to_frame(self) -> pd.DataFrame:
        """One row per run (tidy: one column per field; ``accuracy`` only outside the main stage)."""
        rows = [self._row(r) for r in self.runs]
        return pd.DataFrame(rows)

    def _row(self, r: RunStatus) -> dict[str, Any]:
        d = asdict(r)
        d["b_multiple"] = r.b_multiple
        if self.blind:
            d.pop("accuracy")
        return d

    def to_json(self, indent: int | None = 2) -> str:
        """One JSON document: the study, the stage, the blind note, the totals and every run."""
        doc = {"study": self.study, "stage": self.stage, "plan": self.plan, "at": self.at, "blind": self.blind,
               "note": BLIND_NOTE if self.blind else "", "totals": self.totals(), "runs": [self._row(r) for r in self.runs]}
        return json.dumps(doc, indent=indent, default=str)


def study_status(study_dir: str | Path, stage: str = "main", *, parallel: int | None = None,
                 cache: StatusCache | None = None) -> StudyStatus:
    """Read where every run of ``stage`` stands (see the module docstring). The plan is read with
    :func:`~prereg_kit.plan.load_plan` only: no lock is needed to look."""
    study_dir = Path(study_dir)
    pf = load_plan(study_dir)  # a missing folder or plan.toml is named as typed (resolve_plan_path)
    plan = pf.plan
    if plan.stage(stage) is None and stage != "main":
        raise PreregError(f"{pf.path}: the plan has no stage {stage!r} (have: {', '.join(s.name for s in plan.stages)})")
    study = pf.path.parent
    cache = cache if cache is not None else StatusCache()
    now = utc_now()
    rows, named = [], set()
    for c, s in planned_runs(plan, stage):
        named.add((c, s))
        budget = plan.budget_of(c)
        k = plan.train_to(c, stage)
        if budget.tokens is not None:
            unit, b, stop = "tokens", float(budget.tokens), float(int(round(k * budget.tokens)))
        else:
            unit, b, stop = "iterations", float(budget.iterations), float(int(round(k * budget.iterations)))
        if stage == "calibration":  # the calibration runs stop after iterations 0-2
            unit, b, stop = "iterations", b if unit == "iterations" else None, float(CALIBRATION_ITERATIONS)
        rows.append(run_status(run_dir(study, c, s, stage=stage), c, s, stage, unit=unit, budget=b, stop=stop,
                               cache=cache, now=now))
    base = study / "runs" if stage == "main" else study / "stages" / stage
    for folder in sorted(base.glob("*/seed-*")):
        c, tail = folder.parent.name, folder.name[5:]
        if not folder.is_dir() or not tail.isdigit() or (c, int(tail)) in named:
            continue
        r = run_status(folder, c, int(tail), stage, cache=cache, now=now)
        r.in_plan, r.note = False, "not in plan" + (f"; {r.note}" if r.note else "")
        rows.append(r)
    return StudyStatus(plan.study.id, stage, str(pf.path), rows, parallel)


def run_status(folder: Path, configuration: str, seed: int, stage: str, *, unit: str = "tokens",
               budget: float | None = None, stop: float | None = None, cache: StatusCache | None = None,
               now: datetime | None = None) -> RunStatus:
    """One run's status row (``unit``, ``budget`` and ``stop`` come from the plan; a run the plan
    does not name has none, so no fraction or time left)."""
    now = now or utc_now()
    r = RunStatus(configuration, seed, stage, str(folder), "pending", unit=unit, budget=budget, stop=stop)
    job = read_job_record(folder) or {}
    r.executor, r.job_id, r.attempts = str(job.get("executor") or ""), str(job.get("job_id") or ""), int(job.get("attempts") or 0)
    holder = run_busy(folder) if folder.is_dir() else None
    if holder is not None:
        note = read_note(folder) or {}
        r.holder = f"pid {note.get('pid', '?')} on {note.get('host', '?')}" if note else holder
        r.heartbeat_age_s = heartbeat_age(note, now)
    meta = None
    if (folder / META_FILE).exists():
        try:
            meta = read_meta(folder)
        except RunLogError as e:
            r.note = str(e)
    if meta is not None:
        r.device = device_type(meta)
        _progress(r, folder, cache or StatusCache(), accuracy=not is_blind(stage))
        end = meta.ended_at if meta.status != "running" and meta.ended_at else now
        r.wall_s = max(0.0, (end - meta.started_at).total_seconds())
    r.done = r.tokens if unit == "tokens" else r.iteration
    if stop:
        r.fraction = min(1.0, r.done / stop)
    r.state = _state(holder, meta, job)
    # the run's own rate: wall-clock since it started, or training seconds once it was resumed or
    # while it lies stopped (the wall clock would count the time nobody trained it)
    wall_ok = meta is not None and not getattr(meta, "resumes", None) and (r.state == "running" or meta.ended_at is not None)
    r.elapsed_s = (r.wall_s if wall_ok and r.wall_s else r.train_s) if meta is not None else None
    if r.state == "complete":
        r.eta_s = 0.0
    elif stop and r.done > 0 and r.state != "failed" and r.elapsed_s:
        r.eta_s = max(0.0, stop - r.done) * r.elapsed_s / r.done  # linear in tokens (or iterations)
    return r


def _state(holder: str | None, meta, job: dict[str, Any]) -> str:
    if holder is not None:
        return "running"
    queued = job.get("state") == "queued"
    if meta is None:
        return "queued" if queued else "pending"
    if meta.status == "complete":
        return "complete"
    requeued = queued and (meta.ended_at is None or str(job.get("submitted_at", "")) > meta.ended_at.isoformat())
    if requeued:
        return "queued"
    code = job.get("exit_code")
    if meta.status == "failed" or (job.get("state") == "exited" and code not in (None, 0, *_STOPPED_EXIT)):
        return "failed"
    return "stopped"  # running or stopped in its log, and nobody writes it


def _progress(r: RunStatus, folder: Path, cache: StatusCache, *, accuracy: bool) -> None:
    t = _iterations(folder, cache, r)
    r.iteration = t.iteration + 1 if t.rows else 0  # iterations completed (rows are 0-based)
    r.tokens, r.train_s = t.tokens, t.seconds
    last = _last_eval(folder)
    if last is not None:
        r.evaluations = int(last.get("eval_index", -1)) + 1
    if accuracy:
        r.accuracy = _last_accuracy(folder)


def _iterations(folder: Path, cache: StatusCache, r: RunStatus) -> _Tally:
    jp, pp = folder / f"{ITERATIONS}.jsonl", folder / f"{ITERATIONS}.parquet"
    if not jp.exists() and pp.exists():  # a finished, compacted run
        t = _Tally()
        try:
            tab = pq.read_table(pp, columns=[c for c in _ITER_COLS if c in pq.read_schema(pp).names])
        except (OSError, pa.ArrowException) as e:
            r.note = f"{pp}: unreadable ({type(e).__name__})"
            return t
        _add(t, tab)
        return t
    key = str(jp)
    try:
        st = jp.stat()
    except OSError:
        return _Tally()
    t = cache.tallies.get(key)
    ident = (st.st_ino, st.st_dev)
    if t is None or t.ident != ident or st.st_size < t.offset:
        t = cache.tallies[key] = _Tally(ident=ident)
    if st.st_size == t.offset:
        return t
    with open(jp, "rb") as fh:
        fh.seek(t.offset)
        data = fh.read(st.st_size - t.offset)
    end = data.rfind(b"\n") + 1  # whole lines only: a torn last line waits for the next refresh
    if end <= 0:
        return t
    chunk = data[:end]
    try:
        tab = pa_json.read_json(io.BytesIO(chunk), read_options=pa_json.ReadOptions(block_size=max(1 << 20, end + 1)),
                                parse_options=pa_json.ParseOptions(explicit_schema=_ITER_SCHEMA,
                                                                   unexpected_field_behavior="ignore"))
    except pa.ArrowException:  # a damaged line: sum the lines that parse, say so
        rows = []
        for line in chunk.splitlines():
            try:
                rows.append({k: v for k, v in json.loads(line).items() if k in _ITER_COLS})
            except (ValueError, AttributeError):
                r.note = f"{jp}: a line that is not JSON was skipped"
        tab = pa.Table.from_pylist(rows) if rows else None
    if tab is not None:
        _add(t, tab)
    t.offset += end
    return t


_ITER_SCHEMA = pa.schema([(c, pa.int64() if c == "iteration" or c in TOKEN_KINDS else pa.float64()) for c in _ITER_COLS])


def _add(t: _Tally, tab: pa.Table) -> None:
    if not tab.num_rows:
        return
    names = tab.column_names

    def total(col: str) -> float:
        return float(pc.sum(tab[col]).as_py() or 0) if col in names else 0.0

    t.rows += tab.num_rows
    t.iteration = max(t.iteration, int(pc.max(tab["iteration"]).as_py())) if "iteration" in names else t.rows - 1
    t.tokens += int(sum(total(c) for c in TOKEN_KINDS))
    # the five stages where they were timed, else the unsplit step time (never both)
    split = sum(total(c) for c in STAGE_SECONDS)
    t.seconds += split if split > 0 else total(STEP_SECONDS)


def _last_eval(folder: Path) -> dict[str, Any] | None:
    """The last complete evaluation row (eval rows carry cumulative values): a read of the tail."""
    jp, pp = folder / f"{EVALS}.jsonl", folder / f"{EVALS}.parquet"
    if not jp.exists() and pp.exists():
        try:
            tab = pq.read_table(pp, columns=["eval_index"])
        except (OSError, pa.ArrowException):
            return None
        return {"eval_index": max(tab["eval_index"].to_pylist(), default=-1)}
    try:
        size = jp.stat().st_size
        with open(jp, "rb") as fh:
            span = 1 << 14
            while True:
                start = max(0, size - span)
                fh.seek(start)
                data = fh.read(size - start)
                end = data.rfind(b"\n")
                if end >= 0:
                    begin = data.rfind(b"\n", 0, end) + 1
                    if begin > 0 or start == 0:
                        return json.loads(data[begin:end])
                if start == 0:
                    return None
                span *= 4
    except (OSError, ValueError):
        return None


def _last_accuracy(folder: Path) -> dict[str, float] | None:
    """Mean correct / samples of the last evaluation, per evaluation set (stages other than main)."""
    jp, pp = folder / f"{EVALS}.jsonl", folder / f"{EVALS}.parquet"
    cols = ["eval_index", "eval_set", "correct", "samples"]
    try:
        if jp.exists():
            data = jp.read_bytes()
            data = data[: data.rfind(b"\n") + 1]
            if not data:
                return None
            rows = []
            for line in data.splitlines():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
        elif pp.exists():
            rows = pq.read_table(pp, columns=cols).to_pylist()
        else:
            return None
    except (OSError, pa.ArrowException):
        return None
    rows = [x for x in rows if isinstance(x, dict) and all(c in x for c in cols)]
    if not rows:
        return None
    last = max(int(x["eval_index"]) for x in rows)
    acc: dict[str, list[int]] = {}
    for x in rows:
        if int(x["eval_index"]) == last:
            a = acc.setdefault(str(x["eval_set"]), [0, 0])
            a[0] += int(x["correct"])
            a[1] += int(x["samples"])
    return {k: v[0] / v[1] for k, v in acc.items() if v[1]}


__all__ = ["BLIND_NOTE", "RunStatus", "STATES", "StatusCache", "StudyStatus", "run_status", "study_status"]
