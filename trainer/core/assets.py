"""Study assets built once and cached: the synthetic task files, the local tokenizer, and the
tiny model's supervised warm start.

Real LM training has to be demonstrable where no model hub is reachable, so the CPU study uses a
tiny transformers model (a 2-layer Qwen2 or Llama config) built from its config with a fixed
init seed, then trained briefly on worked solutions (prompt → ``… \\boxed{N}`` + EOS) so that it
starts with non-zero accuracy, as an instruction-tuned model would. The result is saved with
``save_pretrained`` under ``<cache>/warmstart-<hash>/``, keyed by a hash of every setting that
changes it; a second call with the same settings loads it. It is built on one CPU thread with
deterministic algorithms (the caller's settings restored after), so the same settings give the
same weights whatever the caller's thread count. Every model a run loads is identified by
:func:`weights_sha256`, which a recipe may pin (``model_sha256``).

Warm starts that the repository ships (``trainer/data/warmstarts/``, the CPU studies' one) are
copied into the cache instead of being built, after their weights' hash is checked against the
one recorded in ``manifest.json``; a shipped folder whose hash differs is not used: the warm start
is built and its hash compared with the recorded one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from prereg_kit.progress import shown_path
from trainer.config import ConfigError, TrainerConfig, settings_hash
from trainer.data.codetask import CODE_TASK_VERSION, noisy_solution, write_code_task
from trainer.data.problems import load_problems
from trainer.data.synthetic import TOKENIZER_VERSION, build_tokenizer, sft_examples, write_task

# 4: built on one thread with deterministic algorithms, key without the thread count
WARMSTART_VERSION = 4
# What from_pretrained loads: safetensors files when there are any, else the pickled torch ones
WEIGHT_SUFFIXES = ((".safetensors",), (".bin", ".pt", ".pth"))
# Warm starts shipped with the repository; manifest.json records each one's weights hash
SHIPPED_WARM_STARTS = Path(__file__).resolve().parents[1] / "data" / "warmstarts"
PROGRESS_EVERY_S = 5.0  # a warm-start progress line at least this often (a silent build looks hung)


@dataclass(frozen=True)
class Assets:
    """Where a run finds its model (and the hash of its weight files), its training pool and the
    synthetic held-out set."""

    model_path: Path
    train_file: Path | None  # None: task "math"/"gsm8k" read from the hub
    synthetic_eval: Path | None
    model_sha256: str = ""


SYNTHETIC_EVAL_PROBLEMS = 64  # held-out problems of a synthetic set that names no n_problems


def synthetic_eval_size(eval_sets) -> int:
    """How many held-out problems the built-in task's files hold for a study with these evaluation
    sets: the largest ``n_problems`` of its synthetic sets (``SYNTHETIC_EVAL_PROBLEMS`` for one that
    names none, and when no set is synthetic). It is part of the task files' key, and so of the warm
    start's: two studies share a warm start only when this agrees."""
    return max((s.n_problems or SYNTHETIC_EVAL_PROBLEMS for s in eval_sets
                if (s.source or "synthetic").startswith("synthetic")), default=SYNTHETIC_EVAL_PROBLEMS)


def task_files(cfg: TrainerConfig, cache_dir: Path, n_eval: int) -> tuple[Path, Path]:
    """The built-in task's ``train.jsonl`` and ``eval.jsonl`` (disjoint), cached by settings: the
    synthetic arithmetic task, or with ``task = "code"`` the synthetic code task (``trainer/data/codetask.py``)."""

    settings = {"levels": cfg.task.levels, "n_train": cfg.task.train_problems, "n_eval": n_eval, "seed": cfg.task.seed}
    if cfg.task.name == "code":  # a key of its own; the math key is unchanged, so its cached files stay valid
        settings.update(kind="code", version=CODE_TASK_VERSION)
    key = settings_hash(settings)
    folder = cache_dir / f"task-{key}"
    if not (folder / "eval.jsonl").is_file():
        tmp = cache_dir / f".task-{key}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        write = write_code_task if cfg.task.name == "code" else write_task
        write(tmp, n_train=cfg.task.train_problems, n_eval=n_eval, seed=cfg.task.seed, levels=cfg.task.levels)
        _publish(tmp, folder)
    return folder / "train.jsonl", folder / "eval.jsonl"


def _publish(tmp: Path, final: Path) -> None:
    """Rename a finished folder into place; if a concurrent builder got there first, keep theirs."""
    try:
        tmp.rename(final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare_assets(cfg: TrainerConfig, cache_dir: str | Path, study_dir: str | Path, n_eval: int,
                   log=lambda msg: None) -> Assets:
    """Build (or find in the cache) what a run of this configuration needs."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    synthetic_eval = None
    if cfg.task.name == "synthetic" or (cfg.task.name == "code" and not cfg.task.train_file):
        train, synthetic_eval = task_files(cfg, cache, n_eval)
    elif cfg.task.name in ("math", "gsm8k") and not cfg.task.train_file:
        train = None  # the hub's training split (trainer.data.problems.task_pool)
    else:
        train = _resolve(cfg.task.train_file, study_dir)
    if cfg.model.name == "tiny":
        model_path = warm_start(cfg, cache, train, log=log)
    else:
        model_path = _resolve(cfg.model.name, study_dir)
    return Assets(model_path, train, synthetic_eval, checked_weights_sha256(cfg, model_path))


def weight_files(model_path: str | Path) -> list[Path]:
    """The files a model folder's weights are loaded from: its ``*.safetensors`` files, or when it
    has none its ``*.bin``/``*.pt``/``*.pth`` files (top level only), in sorted file-name order."""
    folder = Path(model_path)
    files = [f for f in folder.iterdir() if f.is_file()] if folder.is_dir() else []
    for suffixes in WEIGHT_SUFFIXES:
        found = sorted((f for f in files if f.name.endswith(suffixes)), key=lambda f: f.name)
        if found:
            return found
    raise ConfigError(f"{folder}: no weight files (*.safetensors, *.bin, *.pt, *.pth)")


def weights_sha256(model_path: str | Path) -> str:
    """``sha256:<hex>`` of the model's weight files (:func:`weight_files`) concatenated in sorted
    file-name order: for a single file, what ``sha256sum model.safetensors`` prints."""
    h = hashlib.sha256()
    for f in weight_files(model_path):
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def checked_weights_sha256(cfg: TrainerConfig, model_path: Path) -> str:
    """The weights' hash, refused when it differs from the recipe's pin (``model_sha256``) or from
    the hash a cached warm start recorded when it was built (an edited cache)."""
    digest = weights_sha256(model_path)
    info = model_path / "warmstart.json"
    built = json.loads(info.read_text()).get("model_sha256", "") if cfg.model.name == "tiny" and info.is_file() else ""
    if built and built != digest:
        raise ConfigError(f"{model_path}: weight files changed since the warm start was built "
                          f"(built {built}, now {digest}); delete the folder to rebuild it")
    if cfg.model.sha256 and cfg.model.sha256 != digest:
        what = "warm start" if cfg.model.name == "tiny" else "model"
        raise ConfigError(f"recipe: model_sha256: the {what} at {model_path} has weights {digest}, "
                          f"the recipe pins {cfg.model.sha256}")
    return digest


def _resolve(p: str, study_dir: str | Path) -> Path:
    path = Path(p).expanduser()
    path = path if path.is_absolute() else Path(study_dir) / path
    if not path.exists():
        raise ConfigError(f"{path}: not found (the trainer reads local files only)")
    return path


def build_tiny_model(cfg: TrainerConfig, tokenizer):
    """The tiny causal LM from its config, initialised under the fixed ``tiny.init_seed``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    t = cfg.model.tiny
    if t.hidden_size % t.heads:
        raise ConfigError(f"tiny.hidden_size {t.hidden_size} is not a multiple of tiny.heads {t.heads}")
    conf_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if t.arch == "qwen2" else (LlamaConfig, LlamaForCausalLM)
    conf = conf_cls(
        vocab_size=len(tokenizer), hidden_size=t.hidden_size, num_hidden_layers=t.layers,
        num_attention_heads=t.heads, num_key_value_heads=t.heads, intermediate_size=t.intermediate_size,
        max_position_embeddings=512, tie_word_embeddings=True, attention_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # a fixed init without disturbing the caller's RNG
        torch.manual_seed(t.init_seed)
        return model_cls(conf)


def warm_start_key(cfg: TrainerConfig, train_file: Path) -> str:
    """The cache key of a warm start: a hash of every setting that changes its weights."""
    # No thread count in the key: the build runs on one thread whatever the caller's (see _one_thread)
    return settings_hash({"v": WARMSTART_VERSION, "tiny": cfg.model.tiny.model_dump(), "sft": cfg.model.warm_start.model_dump(),
                          "train": train_file.parent.name + "/" + train_file.name, "tokenizer": TOKENIZER_VERSION})


def warm_start(cfg: TrainerConfig, cache_dir: Path, train_file: Path, log=lambda msg: None,
               shipped: Path | None = SHIPPED_WARM_STARTS, log_every: float = PROGRESS_EVERY_S) -> Path:
    """Supervised warm start of the tiny model; returns its cached ``save_pretrained`` folder.

    ``warm_start.steps`` AdamW steps of ``batch_size`` examples drawn (with a fixed seed) from the
    training pool, loss = mean token cross-entropy on the completion (prompt tokens masked), on
    one CPU thread with deterministic algorithms whatever the caller's settings (restored after).
    ``warmstart.json`` in the folder records the settings, the final loss, the build seconds and
    the weights' ``model_sha256``. A warm start shipped under ``shipped`` with this key and its
    recorded hash is copied instead of built; a progress line goes to ``log`` every
    ``log_every`` seconds of a build.
    """
    key = warm_start_key(cfg, train_file)
    folder = cache_dir / f"warmstart-{key}"
    if (folder / "warmstart.json").is_file():
        return folder
    recorded = ""
    if shipped is not None:
        recorded, ok = _shipped(shipped, key, log)
        if ok:
            tmp = cache_dir / f".warmstart-{key}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(shipped / folder.name, tmp)
            _publish(tmp, folder)
            log(f"warm start: the shipped weights {_shown(shipped / folder.name)} ({recorded}, as recorded) → {_shown(folder)}")
            return folder
    from trainer.core.policy import quiet_transformers

    quiet_transformers()
    ws = cfg.model.warm_start
    log(f"warm start: building {folder.name} ({ws.steps} steps of {ws.batch_size} on one thread)")
    t0 = time.perf_counter()
    with _one_thread():
        model, tok, losses = _train_warm_start(cfg, cache_dir, train_file, _step_logger(log, ws.steps, log_every))
    seconds = time.perf_counter() - t0
    tmp = cache_dir / f".warmstart-{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.copyfile(cache_dir / "tokenizer" / "synthetic_tokenizer.json", tmp / "synthetic_tokenizer.json")
    info = {"settings": {"tiny": cfg.model.tiny.model_dump(), "warm_start": ws.model_dump(), "train_file": str(train_file),
                         "threads": 1},
            "final_loss": float(np.mean(losses[-20:])) if losses else None, "seconds": seconds,
            "parameters": sum(p.numel() for p in model.parameters()), "model_sha256": weights_sha256(tmp)}
    (tmp / "warmstart.json").write_text(json.dumps(info, indent=2) + "\n")
    _publish(tmp, folder)
    log(f"warm start: {ws.steps} steps in {seconds:.1f} s, final loss {info['final_loss']}, "
        f"weights {info['model_sha256']}, saved {_shown(folder)}")
    if recorded:  # the shipped copy was refused: say whether this build reproduces it
        same = "equal to" if recorded == info["model_sha256"] else "not equal to (this machine's CPU kernels differ, docs/trainer.md)"
        log(f"warm start: the rebuilt weights are {same} the recorded {recorded}")
    return folder


def _shown(path: Path) -> str:
    """A folder as a warm-start line names it: relative to the current directory (the study's
    cache as the user typed the study), else a shipped one by its place in the package."""
    shown = shown_path(path)
    root = SHIPPED_WARM_STARTS.parents[2]  # the folder holding the trainer package
    return path.relative_to(root).as_posix() if Path(shown).is_absolute() and path.is_relative_to(root) else shown


def _shipped(shipped: Path, key: str, log) -> tuple[str, bool]:
    """The recorded hash of the shipped warm start with this key ('' when none is shipped), and
    whether its weight files have that hash."""
    manifest = shipped / "manifest.json"
    try:
        recorded = json.loads(manifest.read_text()).get(f"warmstart-{key}", "") if manifest.is_file() else ""
    except (OSError, ValueError, AttributeError) as e:
        log(f"warm start: {_shown(manifest)}: unreadable ({e}); building instead")
        return "", False
    if not recorded:
        return "", False
    try:
        digest = weights_sha256(shipped / f"warmstart-{key}")
    except (OSError, ConfigError) as e:
        log(f"warm start: {_shown(shipped / f'warmstart-{key}')}: {e}; building instead")
        return recorded, False
    if digest != recorded:
        log(f"warm start: {_shown(shipped / f'warmstart-{key}')}: weights {digest}, {_shown(manifest)} records {recorded}: "
            "not used; building instead")
        return recorded, False
    return recorded, True


def _step_logger(log, steps: int, every: float):
    """A per-step callback that logs ``step k/N, loss x (t s)`` at most once per ``every`` seconds
    and at the last step."""
    t0 = last = time.perf_counter()

    def step(k: int, loss: float) -> None:
        nonlocal last
        now = time.perf_counter()
        if now - last >= every or k == steps:
            last = now
            log(f"warm start: step {k}/{steps}, loss {loss:.3f} ({now - t0:.1f} s)")
    return step


@contextlib.contextmanager
def _one_thread():
    """One torch CPU thread, deterministic algorithms (errors, not warnings) and a private RNG,
    the caller's settings restored on exit.

    CPU kernels split reductions by thread, so the summation order, hence the rounding, hence the
    trained weights, depend on the thread count; on one thread they do not."""
    import torch

    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _train_warm_start(cfg: TrainerConfig, cache_dir: Path, train_file: Path, on_step=lambda k, loss: None):
    """The tiny model after its warm start, its tokenizer and the per-step losses (``on_step``
    gets each step's number, from 1, and loss)."""
    import torch

    tok = build_tokenizer(cache_dir / "tokenizer")
    model = build_tiny_model(cfg, tok)
    ws = cfg.model.warm_start
    examples = sft_examples(_with_answer_noise(list(load_problems(train_file)), ws.answer_noise, ws.seed), tok)
    rng = np.random.default_rng([ws.seed, 7])
    opt = torch.optim.AdamW(model.parameters(), lr=ws.learning_rate, weight_decay=0.0)
    model.train()
    losses = []
    for step in range(ws.steps):
        batch = [examples[i] for i in rng.integers(len(examples), size=ws.batch_size)]
        ids, mask, labels = _sft_batch(batch, tok.pad_token_id)
        # Linear decay to 10% of the rate: a short run that ends calm rather than mid-step.
        for g in opt.param_groups:
            g["lr"] = ws.learning_rate * (1 - 0.9 * step / max(1, ws.steps))
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        on_step(step + 1, losses[-1])
    return model, tok, losses


def _with_answer_noise(problems: list, share: float, seed: int) -> list:
    """Worked solutions whose boxed answer is wrong (N ± 1 or 2) in a ``share`` of the examples.

    An imperfect warm start on purpose: the model learns to box a number other than the one it
    just computed some of the time, a habit that a verifier reward on the boxed answer can train
    away within a CPU-sized budget (so a study can see GRPO raise held-out accuracy). Code
    problems: the printed value shifted by ±1, 2 (``codetask.noisy_solution``; fails every test).
    """
    if share <= 0:
        return problems

    rng = np.random.default_rng([seed, 11])
    out = []
    for p in problems:
        if p.solution and p.is_code and rng.random() < share:
            out.append(replace(p, solution=noisy_solution(p.solution, rng)))
            continue
        if p.solution and rng.random() < share:
            wrong = int(p.answer) + int(rng.choice([-2, -1, 1, 2]))
            cut = p.solution.rfind("\\boxed{")
            p = replace(p, solution=p.solution[:cut] + "\\boxed{" + str(wrong) + "}")
        out.append(p)
    return out


def _sft_batch(batch, pad_id: int):
    """Right-padded prompt+completion ids, attention mask, and labels (-100 outside completions)."""
    import torch

    width = max(len(e.prompt_ids) + len(e.completion_ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for i, e in enumerate(batch):
        p, c = len(e.prompt_ids), len(e.completion_ids)
        ids[i, :p + c] = torch.tensor(e.prompt_ids + e.completion_ids)
        mask[i, :p + c] = 1
        labels[i, p:p + c] = torch.tensor(e.completion_ids)
    return ids, mask, labels
