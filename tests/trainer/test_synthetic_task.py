"""Tests for trainer.data.synthetic: the arithmetic task, its files, the local tokenizer, SFT pairs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from trainer.data.problems import find_near_duplicates, load_problems
from trainer.data.synthetic import (
    EOS,
    LEVEL_CAPACITY,
    TaskError,
    build_tokenizer,
    load_tokenizer,
    make_problems,
    render_prompt,
    sft_examples,
    write_task,
)
from trainer.data.verifiers import extract_answer, has_boxed, is_correct

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


# ---------------------------------------------------------------------------------------------
# Problems.
# ---------------------------------------------------------------------------------------------
def test_deterministic_given_seed() -> None:
    assert make_problems(60, seed=3) == make_problems(60, seed=3)
    assert make_problems(60, seed=3) != make_problems(60, seed=4)


def test_levels_and_forms() -> None:
    problems = make_problems(300, seed=0)
    assert Counter(p.level for p in problems) == {1: 100, 2: 100, 3: 100}
    assert len({p.prompt for p in problems}) == 300  # distinct by default
    for p in problems:
        expr = p.prompt.removeprefix("Compute ").removesuffix(".")
        assert p.prompt == f"Compute {expr}."
        assert int(p.answer) == eval(expr)  # our own arithmetic strings
        operands = [int(x) for x in expr.replace("*", "+").replace("-", "+").split("+")]
        if p.level == 1:
            assert "+" in expr and len(operands) == 2 and all(0 <= x <= 9 for x in operands)
        elif p.level == 2:
            assert len(operands) == 2 and all(10 <= x <= 99 for x in operands)
        else:
            assert len(operands) == 3


def test_few_negative_answers() -> None:
    problems = make_problems(3000, levels=(2,), seed=1)
    share = sum(int(p.answer) < 0 for p in problems) / len(problems)
    assert 0.05 < share < 0.15  # p_negative = 0.1 of level 2
    assert all(int(p.answer) >= 0 for p in make_problems(300, levels=(2,), seed=1, p_negative=0.0))
    assert all(int(p.answer) >= 0 for p in make_problems(200, levels=(1, 3), seed=1))


def test_solutions_verify_with_the_default_and_strict_verifier() -> None:
    for p in make_problems(150, seed=2):
        assert p.solution.endswith(f"\\boxed{{{p.answer}}}")
        assert has_boxed(p.solution)
        assert extract_answer(p.solution) == p.answer
        assert is_correct(p.solution, p.answer) and is_correct(p.solution, p.answer, strict=True)
        assert not is_correct(p.solution, str(int(p.answer) + 1))


def test_capacity_and_bad_requests() -> None:
    assert len(make_problems(100, levels=(1,), seed=0)) == LEVEL_CAPACITY[1]
    with pytest.raises(TaskError, match="level 1 has only 100"):
        make_problems(101, levels=(1,), seed=0)
    assert len(make_problems(150, levels=(1,), seed=0, unique=False)) == 150
    with pytest.raises(TaskError, match="unknown synthetic level 4"):
        make_problems(3, levels=(4,), seed=0)
    excluded = {p.prompt for p in make_problems(30, levels=(1,), seed=5)}
    assert not excluded & {p.prompt for p in make_problems(70, levels=(1,), seed=6, exclude=excluded)}


def test_write_task_round_trips_through_the_loader(tmp_path: Path) -> None:
    train_path, eval_path = write_task(tmp_path / "task", n_train=600, n_eval=90, seed=0)
    first = json.loads(train_path.read_text(encoding="utf-8").splitlines()[0])
    assert set(first) >= {"problem", "solution", "level", "unique_id"}
    assert first["level"].startswith("Level ")
    train = load_problems(train_path).numeric_only().with_levels([1, 2, 3])
    evals = load_problems(eval_path)
    assert len(train) == 600 and len(evals) == 90
    assert {p.level for p in evals} == {1, 2, 3}
    assert not find_near_duplicates(list(train), list(evals))  # disjoint
    assert train.without_near_duplicates(evals).last_report.removed_ids == ()
    assert not set(train.ids) & set(evals.ids)
    # Same seed, same files.
    again = write_task(tmp_path / "again", n_train=600, n_eval=90, seed=0)
    assert again[0].read_bytes() == train_path.read_bytes()


# ---------------------------------------------------------------------------------------------
# Tokenizer.
# ---------------------------------------------------------------------------------------------
def test_tokenizer_round_trip(tokenizer) -> None:
    texts = [t for p in make_problems(60, seed=4) for t in (p.prompt, p.solution)]
    texts += ["Compute 7+5.\nThe answer is \\boxed{-12}", "Computer {x} \\frac{1}{2} #### 3 ~"]
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
        assert tokenizer.unk_token_id not in ids


def test_digits_are_single_tokens(tokenizer) -> None:
    tokens = tokenizer.convert_ids_to_tokens(
        tokenizer.encode("Compute 123+45. \\boxed{168}", add_special_tokens=False))
    assert tokens == ["Compute", " ", "1", "2", "3", "+", "4", "5", ".", " ", "\\boxed{", "1", "6", "8", "}"]
    assert tokenizer.vocab_size < 200


def test_special_tokens_and_chat_template(tokenizer) -> None:
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<bos>", "<eos>", "<pad>")
    assert len({tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}) == 3
    prompt = render_prompt(tokenizer, "Compute 7+5.")
    assert prompt == "<bos><|user|>\nCompute 7+5.\n<|assistant|>\n"
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "Compute 7+5."}],
                                        add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if not isinstance(ids, list) else ids
    assert ids[0] == tokenizer.bos_token_id and tokenizer.decode(ids) == prompt
    full = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compute 1+1."},
         {"role": "assistant", "content": "\\boxed{2}"}], tokenize=False)
    assert full == "<bos><|system|>\nBe brief.\n<|user|>\nCompute 1+1.\n<|assistant|>\n\\boxed{2}<eos>\n"


def test_save_and_load(tokenizer, tmp_path: Path) -> None:
    tokenizer.save_pretrained(str(tmp_path / "saved"))
    loaded = load_tokenizer(tmp_path / "saved")
    text = "Compute 3*4+12. 3*4=12. 12+12=24. The answer is \\boxed{24}"
    assert loaded.encode(text) == tokenizer.encode(text)
    assert loaded.chat_template == tokenizer.chat_template
    assert render_prompt(loaded, "Compute 1+2.") == render_prompt(tokenizer, "Compute 1+2.")


def test_build_uses_cache(tmp_path: Path) -> None:
    first = build_tokenizer(tmp_path / "cache")
    assert (tmp_path / "cache" / "tokenizer.json").is_file()
    mtime = (tmp_path / "cache" / "tokenizer.json").stat().st_mtime_ns
    second = build_tokenizer(tmp_path / "cache")  # loaded, not rebuilt
    assert (tmp_path / "cache" / "tokenizer.json").stat().st_mtime_ns == mtime
    assert second.get_vocab() == first.get_vocab()


def test_load_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)


# ---------------------------------------------------------------------------------------------
# Warm-start pairs.
# ---------------------------------------------------------------------------------------------
def test_sft_examples(tokenizer) -> None:
    problems = make_problems(30, seed=9)
    examples = sft_examples(problems, tokenizer)
    assert len(examples) == 30
    for p, ex in zip(problems, examples):
        assert ex.problem_id == p.id
        assert ex.prompt == render_prompt(tokenizer, p.prompt)
        assert ex.completion.endswith(f"\\boxed{{{p.answer}}}{EOS}")
        assert ex.completion_ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(list(ex.prompt_ids) + list(ex.completion_ids)) == ex.prompt + ex.completion
        assert is_correct(ex.completion.removesuffix(EOS), p.answer, strict=True)
