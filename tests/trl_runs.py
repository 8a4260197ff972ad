"""A real TRL run for the importer tests: TRL's GRPOTrainer trains a tiny random Qwen2 with the
synthetic task's tokenizer for four steps on the CPU (about three seconds), so that
``trainer_state.json``, its checkpoints' copies and the completions tables are the files TRL
and transformers themselves write. Built once per test process (:func:`real_run`)."""

from __future__ import annotations

import json
from pathlib import Path

EVAL_PROMPTS, GENERATIONS, BATCH = 1, 2, 4  # an evaluation: 1 prompt x 2 completions, fewer than the batch of 4
STEPS, EVERY = 4, 2  # evaluations and checkpoints at steps 2 and 4
_BUILT: dict[str, Path] = {}


def real_run(root: Path) -> Path:
    """TRL's ``output_dir`` after the run: ``trainer_state.json`` (``save_state``), ``checkpoint-2``
    and ``checkpoint-4`` (each with its ``trainer_state.json``), ``completions/`` (one table per
    log; the tables at 2 and 4 are the evaluations'), and ``args.json`` (``GRPOConfig.to_json_string``)."""
    if "out" in _BUILT:
        return _BUILT["out"]
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from prereg_kit.integrations.trl_rewards import VerifierReward
    from trainer.data.synthetic import build_tokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only contend (about 3 s on one core, 15 s on a busy two)
    tok = build_tokenizer()
    conf = Qwen2Config(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=2, intermediate_size=32, max_position_embeddings=256, tie_word_embeddings=True,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(conf)
        train = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {k}+{k}?"}], "answer": str(2 * k)}
                                   for k in range(1, 9)])
        held = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {k}+1?"}], "answer": str(k + 1)}
                                  for k in range(1, EVAL_PROMPTS + 1)])
        out = root / "trl-out"
        args = GRPOConfig(output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=BATCH,
                          num_generations=GENERATIONS, max_completion_length=8, logging_steps=1, report_to=[],
                          use_cpu=True, save_strategy="steps", save_steps=EVERY, save_only_model=True,
                          eval_strategy="steps", eval_steps=EVERY, per_device_eval_batch_size=EVAL_PROMPTS * GENERATIONS,
                          log_completions=True, num_completions_to_print=0, disable_tqdm=True, beta=0.0, seed=0)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[VerifierReward("default", log_answer=True)],
                              args=args, train_dataset=train, eval_dataset=held)
        try:
            trainer.train()
        finally:
            torch.set_num_threads(threads)
        trainer.save_state()
    (out / "args.json").write_text(args.to_json_string())
    _BUILT["out"] = out
    return out


def keys_of(state: dict) -> dict[str, set[str]]:
    """The key sets of a state's log_history by kind of entry: generating training step, other
    training step, evaluation, summary."""
    kinds: dict[str, set[str]] = {}
    for e in state["log_history"]:
        kind = ("summary" if "train_runtime" in e else "eval" if any(k.startswith("eval_") for k in e)
                else "generation" if "completions/mean_length" in e else "step")
        kinds.setdefault(kind, set()).update(e)
    return kinds


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())
