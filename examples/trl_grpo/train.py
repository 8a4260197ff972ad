"""Train one run of a prereg-kit study with TRL's GRPOTrainer, logged live by PreregCallback.

    python train.py STUDY_DIR --configuration grpo --seed 0

The callback refuses an unlocked plan, a configuration or seed the plan does not name, and TRL
settings that differ from the preregistered recipe; it writes runs/<configuration>/seed-<n>/,
evaluates with the plan's sets and sampling seeds, stops at the plan's train_to and seals the
run. Run it again after an interruption: TRL resumes from its last checkpoint (saved at each
evaluation) and the run log from the same point.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", type=Path)
    ap.add_argument("--configuration", required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--max-steps", type=int, default=500, help="an upper bound; the callback stops at train_to")
    args = ap.parse_args()

    import logging
    import warnings

    # PreregCallback reports progress through the prereg_kit logger: one line per evaluation, as
    # `prereg run` does (blind in the main stage: no accuracy until the study is analyzed)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        PreTrainedTokenizerFast,
        PrinterCallback,
    )
    from transformers.trainer_utils import get_last_checkpoint
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from prereg_kit.integrations.trl import PreregCallback

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    callback = PreregCallback(args.study, args.configuration, args.seed)  # refuses before any work
    torch.set_num_threads(callback.cfg.engine.threads or 2)
    model_dir = callback.assets().model_path  # the plan's model (here: the warm-started tiny model)
    if (model_dir / "synthetic_tokenizer.json").is_file():  # the built-in task's own tokenizer
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p.prompt}], "answer": p.answer}
                                 for p in callback.train_problems()])

    output_dir = args.study / "trl" / args.configuration / f"seed-{args.seed}"
    config = GRPOConfig(output_dir=str(output_dir), max_steps=args.max_steps, beta=0.0, report_to=[],
                        save_strategy="no", disable_tqdm=True, bf16=False, use_cpu=not torch.cuda.is_available(),
                        **callback.grpo_settings())  # group size, limit, sampling, learning rate, logging
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=callback.reward_functions(),
                          args=config, train_dataset=dataset, callbacks=[callback])
    trainer.remove_callback(PrinterCallback)  # TRL's printer shows the training reward; the callback's lines replace it
    last = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
