"""``prereg run``: every configuration × seed of a plan's stage, in local processes.

* Main-stage runs need a locked plan whose content is unchanged since its last lock entry
  (comment-only edits are allowed); calibration, pilot and smoke runs may run on an unlocked
  plan. Every run's metadata records the canonical hash of the plan it was launched under.
* A run whose log says ``complete`` is skipped; an incomplete one is resumed from its last
  checkpoint (``python -m trainer`` does that by itself when its folder holds a log). A run that
  another process is writing (its one-writer lock is held: another ``prereg run``, a cluster job)
  is not started, and ``prereg run`` exits 1 naming the holder; should two launchers still race
  to the same run, the trainer's own lock stops the second one before it reads anything.
* A main-stage run seals itself into the plan's lock chain when it completes (``prereg_kit.chain.seal``).
  A run the chain seals already but whose folder is gone or incomplete (deleted, or rerun over)
  is refused before anything runs: no new run could match its seal.
* SIGTERM stops the runs as Ctrl-C does: every worker gets SIGTERM (its run marks itself
  ``stopped``, resumable), the launcher waits for them and exits 130.
* Shared assets (synthetic task, tokenizer, warm start) are built once here, before any run
  process starts, so concurrent runs never race to build them and their time is not a run's.
* One job slot per device by default (CUDA devices are handed out with ``CUDA_VISIBLE_DEVICES``);
  on CPU one job at a time. Each slot trains its runs one after another in one worker process
  (``trainer.run_worker``: imports and start-up paid once per slot, every run still with its own
  log, lock, seeds and result); ``fresh_process`` starts one ``python -m trainer`` per run instead.
  Main-stage and calibration runs never share a device: ``--jobs`` above the number of CUDA
  devices is refused for them (their seconds are compared, dense-rewards paper §2.3); smoke and
  pilot runs may share.
* Each run's ``executor.json`` names its process (executor ``local``, job id ``pid <worker> run
  k/m``, or the launcher's ``pid <n>`` with ``fresh_process``), as the Slurm and Ray executors
  (``trainer.executors``) name their jobs; ``prereg status`` reads it.
* The progress bars show the latest evaluation's accuracy except in the main stage, which stays
  blind until it is analyzed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from prereg_kit import __version__
from prereg_kit.chain.lock import read_chain
from prereg_kit.chain.seal import sealed_not_complete
from prereg_kit.errors import PreregError, ViolationError
from prereg_kit.plan import PlanFile
from prereg_kit.runlog import RunLogError, check_inside, read_meta, record_exited, record_started, run_busy
from prereg_kit.stages import is_blind
from prereg_kit.stages.calibration import CALIBRATION_ITERATIONS
from prereg_kit.study.jobs import require_locked, stage_runs  # noqa: F401  (require_locked: launch's public name)
from trainer.config import EvalSetSpec, RunSpec, config_of, plan_flat_keys
from trainer.core.assets import prepare_assets, synthetic_eval_size
from trainer.core.program_judge import judge_meta
from trainer.core.tracking import where_tracked
from trainer.executors.options import check_local_jobs
from trainer.progress_lines import RunLines

SPEC_FILE = "spec.json"
LOG_FILE = "train.log"


def stage_run_dir(study_dir: str | Path, configuration: str, seed: int, stage: str) -> Path:
    """``runs/<configuration>/seed-<n>`` for the main stage, ``stages/<stage>/…`` otherwise."""
    from prereg_kit import runlog

    try:
        return runlog.run_dir(study_dir, configuration, seed, stage=stage)
    except TypeError:  # an older run_dir without stages
        if stage == "main":
            return runlog.run_dir(study_dir, configuration, seed)
        return Path(study_dir) / "stages" / stage / configuration / f"seed-{seed}"


@dataclass
class Job:
    configuration: str
    seed: int
    folder: Path
    spec: RunSpec
    state: str  # "new" | "resume" | "complete" | "busy" (another writer holds it)
    result: str = ""  # after running: "complete" | "skipped (…)" | "failed (…)"
    progress: dict = field(default_factory=dict)
    process: subprocess.Popen | None = None
    exit_code: int | None = None  # of the run process, once it has ended


def seed_major(runs: Sequence) -> list:
    """The runs in seed-major order (every configuration's first seed, then every second seed, …):
    a sequential plan's early looks complete first, and a worker's first (cold) run is not always
    the same configuration's."""
    configs = list(dict.fromkeys(r.configuration for r in runs))
    place: dict[str, int] = {}  # a seed's place within its own configuration (they may have other seeds)
    keyed = []
    for r in runs:
        keyed.append(((place.get(r.configuration, 0), configs.index(r.configuration)), r))
        place[r.configuration] = place.get(r.configuration, 0) + 1
    return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]


def plan_jobs(study_dir: str | Path, stage: str = "main", configs: Sequence[str] | None = None,
              seeds: Sequence[int] | None = None, trackers: Sequence[str] = ()) -> tuple[PlanFile, list[Job]]:
    """The runs of a stage (optionally a subset), each with its spec and whether it is done;
    ``trackers``: the live trackers every run logs to (``trainer.core.tracking``). A main run that
    the lock chain seals but that is not complete on disk (deleted, or rerun over) is refused,
    one line each, before anything is run (``prereg_kit.chain.seal.sealed_not_complete``)."""
    pf, runs = stage_runs(study_dir, stage, configs, seeds)  # main runs: locked, unchanged plan
    runs = seed_major(runs)
    plan = pf.plan
    study = pf.path.parent
    ev = plan.evaluation
    sets = [EvalSetSpec(name=s.name, source=s.source, n_problems=s.n_problems, levels=s.levels, at=s.at) for s in ev.sets]
    jobs = []
    cfgs: dict[str, object] = {}
    for run in runs:
        name, seed, folder = run.configuration, run.seed, run.folder
        try:  # a symbolic link on the way would put the run, and its seal, outside the study
            check_inside(study, folder)
        except RunLogError as e:
            raise PreregError(f"{e}; nothing run") from None
        if name not in cfgs:
            if not plan.configurations[name].runnable:
                raise PreregError(f"{pf.path}: configuration {name!r} is marked runnable = false: "
                                  f"{plan.configurations[name].not_runnable}")
            cfgs[name] = config_of(plan, name, where=f"{pf.path}: configuration {name!r}")
        budget = plan.budget_of(name)  # the configuration's own B, else the study's
        by_tokens = budget.tokens is not None
        spec = RunSpec(study=plan.study.id, configuration=name, seed=seed, stage=stage,
                       plan_hash=pf.content_sha256, study_dir=str(study), run_dir=str(folder),
                       cache_dir=str(study / ".cache"), budget_tokens=budget.tokens, budget_iterations=budget.iterations,
                       eval_interval=budget.eval_interval_tokens() if by_tokens else budget.eval_interval_iterations(),
                       train_to=plan.train_to(name, stage),
                       stop_iterations=CALIBRATION_ITERATIONS if stage == "calibration" else None,  # iterations 0-2
                       eval_sets=sets, eval_samples=ev.samples, eval_temperature=ev.temperature,
                       eval_top_p=ev.top_p, eval_greedy=ev.greedy, config=cfgs[name], tool_version=__version__,
                       trackers=list(trackers))
        jobs.append(Job(name, seed, folder, spec, _state(folder, pf.content_sha256)))
    if stage == "main":  # before anything trains: a run the chain seals is never trained again
        again = sealed_not_complete(study, [j.folder for j in jobs if j.state in ("new", "resume")], read_chain(pf.path))
        if again:
            raise ViolationError(*again, f"{pf.path}: nothing run")
    return pf, jobs


def _stop(j: Job) -> int:
    """Where a run's progress bar ends: k·B tokens, or k·N iterations for an iteration budget."""
    return j.spec.stop_tokens if j.spec.stop_tokens is not None else (j.spec.iteration_stop or 1)


def _state(folder: Path, plan_hash: str) -> str:
    if run_busy(folder) is not None:
        return "busy"
    if not (folder / "meta.json").exists():
        return "new"
    try:
        meta = read_meta(folder)
    except RunLogError as e:
        raise PreregError(str(e)) from None
    if meta.status == "complete":
        return "complete"
    if meta.plan_hash != plan_hash:
        raise ViolationError(f"{folder}: an incomplete run launched under another plan hash ({meta.plan_hash[:12]}…); "
                             "it cannot be resumed under this plan: move it aside to rerun it")
    return "resume"


def prepare(jobs: Sequence[Job], log: Callable[[str], None] = print) -> None:
    """Build each distinct configuration's assets (task files, warm start) once, in this process."""
    seen = set()
    judged = set()
    for j in jobs:
        if j.state in ("complete", "busy"):
            continue
        cfg = j.spec.config
        if cfg.task.name == "code" and (cfg.rewards.sandbox, cfg.task.train_file) not in judged:  # refuse a weak judge before any run
            judged.add((cfg.rewards.sandbox, cfg.task.train_file))
            judge_meta(j.spec, where=f"{j.configuration}: ")
        n_eval = synthetic_eval_size(j.spec.eval_sets)
        key = cfg.model_dump_json(include={"task", "train_file", "task_levels", "task_train_problems", "task_seed",
                                           "model", "model_sha256", "tiny", "warm_start"}) + str(n_eval)
        if key in seen:
            continue
        seen.add(key)
        if cfg.engine.threads:
            import torch

            torch.set_num_threads(cfg.engine.threads)
        prepare_assets(cfg, j.spec.cache_dir, j.spec.study_dir, n_eval, log=log)


def default_jobs() -> tuple[int, list[str | None]]:
    """One job per visible CUDA device, else one CPU job."""
    try:
        import torch

        n = torch.cuda.device_count()
    except ImportError:
        n = 0
    return (n, [str(i) for i in range(n)]) if n else (1, [None])


def _env(device: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ) | (extra or {})
    root = str(Path(__file__).resolve().parents[1])  # run the same code as this launcher
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if device is not None:
        env["CUDA_VISIBLE_DEVICES"] = device
    return env


def run_one(job: Job, device: str | None, on_progress: Callable[[Job], None] = lambda j: None, *,
            env: dict[str, str] | None = None, preexec_fn: Callable[[], None] | None = None,
            on_start: Callable[[subprocess.Popen], None] = lambda p: None) -> str:
    """Run one job in its own process (``python -m trainer spec.json``); return its result.

    ``env``: extra variables of the run process (``PREREG_EXECUTOR``, ``PREREG_JOB_ID``);
    ``preexec_fn``: run in the child before exec (an executor makes the run die with its worker);
    ``on_start``: called with the process as soon as it exists (the launcher stops it on SIGTERM)."""
    job.folder.mkdir(parents=True, exist_ok=True)
    spec_path = job.folder / SPEC_FILE
    job.spec.save(spec_path)
    with open(job.folder / LOG_FILE, "ab") as errlog:
        proc = subprocess.Popen([sys.executable, "-m", "trainer", str(spec_path)], stdout=subprocess.PIPE,
                                stderr=errlog, env=_env(device, env), text=True, preexec_fn=preexec_fn)
        job.process = proc
        on_start(proc)
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                job.progress.update(json.loads(line))
            except json.JSONDecodeError:
                continue
            on_progress(job)
        rc = proc.wait()
    job.exit_code = rc
    return _result(job, rc)


def _result(job: Job, rc: int, worker_died: bool = False) -> str:
    """The result of a run from its exit code (and, when it failed, its log's last line)."""
    if rc == 0 and not worker_died:
        return "complete"
    if rc == 3 and not worker_died:  # the trainer found the run complete: another process finished it meanwhile
        return "skipped (completed by another process)"
    log = job.folder / LOG_FILE
    tail = (log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []) or [""]
    return f"failed ({'the worker ended during the run, ' if worker_died else ''}exit {rc}: {tail[0][:200]})"


class RunWorker:
    """A ``python -m trainer.run_worker`` process of one job slot (one device): it trains the runs
    handed to it one after another, each as ``python -m trainer`` would (its own log, lock,
    seeds; ``trainer.run_worker``), so the imports and start-up are paid once per slot."""

    command = [sys.executable, "-m", "trainer.run_worker"]

    def __init__(self, device: str | None) -> None:
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=_env(device), text=True, bufsize=1)
        self.retiring = False  # the worker said it ends after its last run

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        """Whether the worker takes another run."""
        return not self.retiring and self.proc.poll() is None

    def run(self, job: Job, on_progress: Callable[[Job], None] = lambda j: None, *,
            env: dict[str, str] | None = None) -> str:
        """Train ``job`` in this worker; its result, as :func:`run_one` gives it. A worker that dies
        during the run (a hard crash) fails the run with the worker's exit code (negative: a signal)."""
        job.folder.mkdir(parents=True, exist_ok=True)
        spec_path = job.folder / SPEC_FILE
        job.spec.save(spec_path)
        job.process = self.proc
        assert self.proc.stdin is not None and self.proc.stdout is not None
        rc: int | None = None
        try:
            self.proc.stdin.write(json.dumps({"spec": str(spec_path), "log": str(job.folder / LOG_FILE),
                                              "env": env or {}}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):  # the worker is gone already
            pass
        else:
            for line in self.proc.stdout:
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if not isinstance(msg, dict):
                    continue
                if "worker_done" in msg:
                    rc = int(msg["worker_done"])
                    self.retiring = bool(msg.get("retiring"))
                    break
                job.progress.update(msg)
                on_progress(job)
        if rc is None:  # no word of the run's end: the worker died under it
            rc = self.proc.wait()
            job.exit_code = rc if rc != 0 else -1
            return _result(job, job.exit_code, worker_died=True)
        job.exit_code = rc
        return _result(job, rc)

    def close(self) -> None:
        """End the worker (the end of its input) and wait for it."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs in the main thread, SIGTERM raises KeyboardInterrupt there, so that
    `kill <pid>` (a scheduler, a container stop) ends the runs as Ctrl-C does, not by leaving
    their processes to train on alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)  # None: set outside Python


def _stop_processes(procs: Sequence[subprocess.Popen]) -> None:
    """SIGTERM each process still running (each run marks itself 'stopped', resumable) and wait for
    them all; a second Ctrl-C or SIGTERM while waiting kills them."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    try:
        for proc in procs:
            proc.wait()
    except KeyboardInterrupt:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait()


def run_jobs(jobs: Sequence[Job], n_jobs: int | None = None, on_progress: Callable[[Job], None] = lambda j: None,
             on_done: Callable[[Job], None] = lambda j: None, *, fresh_process: bool = False) -> list[Job]:
    """Run the jobs that are not complete, ``n_jobs`` at a time: one thread per slot, each handing
    its runs to one worker process (:class:`RunWorker`), or with ``fresh_process`` starting one
    ``python -m trainer`` process per run. A worker that died is replaced for the slot's next run.

    Ctrl-C or SIGTERM stops every process this call started (their runs marked 'stopped',
    resumable), waits for them, and raises :class:`PreregError` with exit code 130."""
    todo = [j for j in jobs if j.state not in ("complete", "busy")]
    n_default, devices = default_jobs()
    n = max(1, n_jobs or n_default)
    queue = list(enumerate(todo, 1))
    lock = threading.Lock()
    stopping = threading.Event()
    started: list[subprocess.Popen] = []  # every process a slot started, so that an interrupt reaches each

    def track(proc: subprocess.Popen) -> None:
        with lock:
            started.append(proc)
            if stopping.is_set():  # started while the launcher was being stopped
                proc.terminate()

    def worker(slot: int) -> None:
        device = devices[slot % len(devices)]
        runner: RunWorker | None = None
        try:
            while True:
                with lock:
                    if not queue or stopping.is_set():
                        return
                    k, job = queue.pop(0)
                holder = run_busy(job.folder)
                env = {"PREREG_EXECUTOR": "local"}
                try:
                    if holder is not None:
                        job.result = f"failed (another writer holds this run: {holder})"
                    elif fresh_process:  # executor.json: this launcher is the job behind the run (prereg status reads it)
                        env["PREREG_JOB_ID"] = f"pid {os.getpid()}"
                        record_started(job.folder, "local", env["PREREG_JOB_ID"])
                        job.result = run_one(job, device, on_progress, env=env, on_start=track)
                        record_exited(job.folder, job.exit_code if job.exit_code is not None else -1, job.result)
                    else:
                        if runner is None or not runner.alive():
                            runner = RunWorker(device)
                            track(runner.proc)
                        env["PREREG_JOB_ID"] = f"pid {runner.pid} run {k}/{len(todo)}"
                        record_started(job.folder, "local", env["PREREG_JOB_ID"])
                        job.result = runner.run(job, on_progress, env=env)
                        record_exited(job.folder, job.exit_code if job.exit_code is not None else -1, job.result)
                except PreregError as e:  # the launcher's own write for the run failed (a full disk): that run fails
                    job.result = f"failed ({' '.join(e.lines)})"
                on_done(job)
        finally:
            if runner is not None:
                runner.close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(min(n, len(todo)))]
    with _sigterm_as_interrupt():
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        except KeyboardInterrupt:
            stopping.set()
            with lock:
                queue.clear()
                procs = list(started)
            _stop_processes(procs)
            for t in threads:  # each records how its run ended, and closes its worker
                t.join(10)
            raise PreregError("interrupted: running runs were stopped; `prereg run` again resumes them", exit_code=130) from None
    return list(jobs)


def run_study(study_dir: str | Path, *, stage: str = "main", configs: Sequence[str] | None = None,
              seeds: Sequence[int] | None = None, n_jobs: int | None = None, console=None,
              fresh_process: bool = False, trackers: Sequence[str] = ()) -> list[Job]:
    """Plan, prepare and run a stage with rich progress bars on a terminal, plain progress lines
    elsewhere (``trainer.progress_lines``); returns the jobs with results. The runs train in one
    worker process per job slot, or with ``fresh_process`` in one process each (:func:`run_jobs`);
    each logs live to ``trackers`` (names checked by ``trainer.core.tracking.check_trackers``)."""
    from rich.console import Console

    con = console or Console(stderr=True)
    cuda = [d for d in default_jobs()[1] if d is not None]  # none on a CPU-only machine: no device to share
    check_local_jobs(n_jobs, len(cuda), stage)  # main-stage runs never share a GPU
    pf, jobs = plan_jobs(study_dir, stage, configs, seeds, trackers)
    flat = plan_flat_keys(pf.plan)
    if flat:  # still read; the sectioned names are what docs/trainer.md describes
        shown = ", ".join(f"{old} → {new}" for old, new in flat[:3]) + (", …" if len(flat) > 3 else "")
        con.print(f"{pf.path}: deprecated: {len(flat)} recipe key(s) without sections, still read ({shown}; "
                  "docs/trainer.md, \"The recipe\")", markup=False, highlight=False)
    done = [j for j in jobs if j.state == "complete"]
    busy = [j for j in jobs if j.state == "busy"]
    for j in busy:
        j.result = f"failed (another writer holds this run: {run_busy(j.folder) or 'released since'})"
    con.print(f"{pf.path}: stage {stage}, {len(jobs)} run(s): {len(done)} complete (skipped), "
              f"{sum(j.state == 'resume' for j in jobs)} to resume, {sum(j.state == 'new' for j in jobs)} new"
              + (f", {len(busy)} held by another writer (not started)" if busy else "")
              + f"; plan {pf.content_sha256[:12]}…")
    for j in busy:
        con.print(f"  {j.configuration} seed {j.seed}: {j.result}")
    if len(done) + len(busy) == len(jobs):
        return jobs
    if trackers:
        con.print(where_tracked(trackers, pf.path.parent, stage), markup=False, highlight=False)
    t0 = time.perf_counter()
    prepare(jobs, log=lambda m: con.print(m, markup=False, highlight=False))
    if not con.is_terminal:  # a pipe or a log file: plain lines as the runs move (a bar would show only at the end)
        lines = RunLines([j for j in jobs if j.state not in ("complete", "busy")],
                         lambda m: con.print(m, markup=False, highlight=False), blind=is_blind(stage)).start()
        try:
            run_jobs(jobs, n_jobs, lines.update, lines.done, **_mode(fresh_process))
        finally:
            lines.stop()
    else:
        _run_with_bars(jobs, n_jobs, stage, con, **_mode(fresh_process))
    failed = [j for j in jobs if j.result.startswith("failed")]
    skipped = [j for j in jobs if j.result.startswith("skipped")]
    con.print(f"{len(jobs) - len(done) - len(failed) - len(skipped)} run(s) finished, {len(failed)} failed, "
              f"{len(done) + len(skipped)} skipped, in {time.perf_counter() - t0:.0f} s")
    for j in failed + skipped:
        con.print(f"  {j.configuration} seed {j.seed}: {j.result} (log: {j.folder / LOG_FILE})")
    return jobs


def _mode(fresh_process: bool) -> dict:
    """``run_jobs``'s keyword for the process mode, given only when it is not the default."""
    return {"fresh_process": True} if fresh_process else {}


def _run_with_bars(jobs: Sequence[Job], n_jobs: int | None, stage: str, con, fresh_process: bool = False) -> None:
    """Run the jobs under one rich progress bar each (a terminal)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=con, transient=False) as bar:
        tasks = {id(j): bar.add_task(f"{j.configuration} seed {j.seed}", total=_stop(j), info=j.state)
                 for j in jobs if j.state not in ("complete", "busy")}

        blind = is_blind(stage)  # the main stage stays blind until it is analyzed: no accuracy shown

        def on_progress(j: Job) -> None:
            p = j.progress
            shown = "accuracy" in p and not blind
            info = f"it {p.get('iteration', 0)}" + (f"  acc {p['accuracy']:.3f}" if shown else "")
            j.progress.setdefault("_info", "")
            if shown:
                j.progress["_info"] = info
            done_so_far = p.get("tokens", 0) if j.spec.stop_tokens is not None else p.get("iteration", 0)
            bar.update(tasks[id(j)], completed=min(done_so_far, _stop(j)), info=j.progress["_info"] or info)

        def on_done(j: Job) -> None:
            bar.update(tasks[id(j)], info=f"{j.progress.get('_info', '')}  {j.result}")

        run_jobs(jobs, n_jobs, on_progress, on_done, **_mode(fresh_process))

