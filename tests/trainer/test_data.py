"""Tests for trainer.data.problems: loaders, filters, near-duplicate removal, the prompt stream."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.data.problems import (
    DataError,
    Problem,
    ProblemPool,
    find_near_duplicates,
    load_hub,
    load_problems,
    normalize_text,
    parse_level,
    prompt_stream_batch,
    prompt_stream_positions,
    shingles,
    word_tokens,
)

MATH_ROWS = [
    {"problem": "What is $1+1$?", "solution": "It is $\\boxed{2}$.", "level": "Level 1",
     "type": "Algebra", "unique_id": "m1"},
    {"problem": "Find half of one.", "solution": "$\\boxed{\\frac{1}{2}}$", "level": "Level 3",
     "type": "Algebra", "unique_id": "m2"},
    {"problem": "Which interval?", "solution": "So $\\boxed{(0, 1]}$.", "level": "Level 5",
     "type": "Algebra", "unique_id": "m3"},
    {"problem": "Sum of the roots?", "solution": "First \\boxed{3}, no: \\boxed{-4}.",
     "level": "Level ?", "type": "Algebra", "unique_id": "m4"},
]
GSM_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7"},
    {"question": "A shop sells 1000 pens twice.", "answer": "Twice: 2000\n#### 2,000"},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# Loading.
# ---------------------------------------------------------------------------------------------
def test_load_math_jsonl(tmp_path: Path) -> None:
    pool = load_problems(write_jsonl(tmp_path / "math_train.jsonl", MATH_ROWS))
    assert pool.ids == ("m1", "m2", "m3", "m4")
    p1, p2, p3, p4 = pool
    assert (p1.prompt, p1.answer, p1.level, p1.source) == ("What is $1+1$?", "2", 1, "math_train")
    assert p2.answer == "1/2" and p2.numeric_answer == 0.5 and p2.level == 3
    assert p3.answer == "(0,1]" and p3.numeric_answer is None
    assert p4.answer == "-4" and p4.level is None  # the last box of the solution


def test_load_gsm8k_parquet(tmp_path: Path) -> None:
    path = tmp_path / "gsm.parquet"
    pd.DataFrame(GSM_ROWS).to_parquet(path)
    pool = load_problems(path)
    assert [p.answer for p in pool] == ["7", "2000"]
    assert pool.ids == ("gsm:1", "gsm:2")
    assert all(p.level is None and p.source == "gsm" for p in pool)


def test_load_math_parquet_same_as_jsonl(tmp_path: Path) -> None:
    pd.DataFrame(MATH_ROWS).to_parquet(tmp_path / "m.parquet")
    a = load_problems(tmp_path / "m.parquet", source="x")
    b = load_problems(write_jsonl(tmp_path / "m.jsonl", MATH_ROWS), source="x")
    assert a.problems == b.problems


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"problem": "x", "solution": "no box"}], r"bad.jsonl:1: field 'solution' has no \\boxed"),
        ([{"question": "x", "answer": "7"}], r"bad.jsonl:1: field 'answer' has no '#### N'"),
        ([{"text": "x"}], r"bad.jsonl:1: cannot tell the layout"),
        ([{"problem": 3, "solution": "\\boxed{1}"}], r"bad.jsonl:1: field 'problem' must be a string"),
        ([{"id": "a", "question": "x", "answer": "#### 1"}, {"id": "a", "question": "y", "answer": "#### 2"}],
         r"duplicate problem id 'a'"),
    ],
)
def test_load_errors_name_file_and_field(tmp_path: Path, rows: list[dict], message: str) -> None:
    with pytest.raises(DataError, match=message):
        load_problems(write_jsonl(tmp_path / "bad.jsonl", rows))


def test_load_file_errors(tmp_path: Path) -> None:
    (tmp_path / "broken.jsonl").write_text('{"problem": "x"\n', encoding="utf-8")
    with pytest.raises(DataError, match="broken.jsonl:1: invalid JSON"):
        load_problems(tmp_path / "broken.jsonl")
    with pytest.raises(DataError, match="no such file"):
        load_problems(tmp_path / "missing.jsonl")
    (tmp_path / "x.csv").write_text("a\n", encoding="utf-8")
    with pytest.raises(DataError, match="unsupported file type"):
        load_problems(tmp_path / "x.csv")
    assert issubclass(DataError, ValueError)


def test_load_hub_without_network_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never wait on a network that is not there
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataError, match="'no/such-dataset'"):
        load_hub("no/such-dataset", split="train")


def test_parse_level() -> None:
    assert parse_level("Level 3") == 3 and parse_level("level5") == 5 and parse_level(4) == 4
    assert parse_level("Level ?") is None and parse_level(None) is None and parse_level("") is None


# ---------------------------------------------------------------------------------------------
# Filters.
# ---------------------------------------------------------------------------------------------
def test_filters_return_new_pools_with_reports(tmp_path: Path) -> None:
    pool = load_problems(write_jsonl(tmp_path / "m.jsonl", MATH_ROWS))
    numeric = pool.numeric_only()
    assert numeric.ids == ("m1", "m2", "m4") and len(pool) == 4  # the original is unchanged
    assert numeric.last_report.removed_ids == ("m3",)
    leveled = numeric.with_levels([1, 2, 3])
    assert leveled.ids == ("m1", "m2")  # m4 has no level
    assert [r.rule for r in leveled.reports] == ["numeric answer", "level in {1, 2, 3}"]
    assert "removed 1 of 3" in leveled.last_report.summary()
    assert "pool: 2 problems" in leveled.summary()
    assert pool.max_prompt_chars(16).ids == ("m1", "m3")


def test_dedup_against_eval_sets() -> None:
    base = ("A train leaves the station at noon and travels at sixty miles per hour toward the "
            "city, while a second train leaves the city at one o'clock and travels at forty miles "
            "per hour toward the station. The two stations are three hundred miles apart. At "
            "what time do the two trains meet, and how far from the station are they then?")
    pool = ProblemPool.from_problems([
        Problem("t1", base.upper() + "  ", "1"),  # exact after normalization
        Problem("t2", base.replace("sixty", "seventy"), "1"),  # one word changed: Jaccard 0.6+
        Problem("t3", "completely different words about a circle of radius five and its area", "1"),
        Problem("t4", "Compute 7-5.", "2"),  # short texts: operators matter
    ])
    evals = [Problem("e1", base, "1"), Problem("e2", "Compute 7+5.", "12")]
    out = pool.without_near_duplicates(evals)
    assert out.ids == ("t3", "t4")
    rep = out.last_report
    assert rep.removed_ids == ("t1", "t2") and rep.before == 4 and rep.after == 2
    kinds = {m.query_id: (m.kind, m.reference_id) for m in rep.matches}
    assert kinds == {"t1": ("exact", "e1"), "t2": ("jaccard", "e1")}
    assert "1 exact, 1 by Jaccard" in rep.summary()


def test_tokens_and_shingles() -> None:
    assert word_tokens("Compute 7+5.") == ["compute", "7", "+", "5", "."]
    assert normalize_text("  What IS  $x$? ") == "what is $ x $ ?"
    assert shingles(["a", "b"], 8) == frozenset(["a b"])
    assert len(shingles([str(i) for i in range(10)], 8)) == 3


def _random_problems(rng: np.random.Generator, n: int, prefix: str) -> list[Problem]:
    """Word problems with shared boilerplate (long posting lists) and Zipf-distributed words."""
    vocab = [f"w{i}" for i in range(3000)]
    templates = [" ".join(f"t{k}x{j}" for j in range(10)) for k in range(15)]
    out = []
    for i in range(n):
        length = int(rng.integers(25, 90))
        words = [vocab[min(int(z), 2999)] for z in rng.zipf(1.3, size=length)]
        out.append(Problem(f"{prefix}{i}", templates[i % 15] + " " + " ".join(words), "1"))
    return out


def _brute_force(queries: list[Problem], refs: list[Problem], t: float = 0.6) -> dict[str, str]:
    ref_sets = [shingles(word_tokens(r.prompt)) for r in refs]
    ref_keys = [normalize_text(r.prompt) for r in refs]
    out = {}
    for q in queries:
        a = shingles(word_tokens(q.prompt))
        key = normalize_text(q.prompt)
        if key in ref_keys:
            out[q.id] = refs[ref_keys.index(key)].id
            continue
        sims = [len(a & b) / len(a | b) for b in ref_sets]
        j = int(np.argmax(sims))
        if sims[j] >= t:
            out[q.id] = refs[j].id
    return out


def _perturb(rng: np.random.Generator, text: str, k: int) -> str:
    words = text.split()
    for i in rng.choice(len(words), size=k, replace=False):
        words[int(i)] = "changed"
    return " ".join(words)


def test_dedup_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    refs = _random_problems(rng, 150, "e")
    queries = _random_problems(rng, 200, "q")
    for i in range(40):  # near copies with 1..8 changed words: some above, some below 0.6
        src = refs[i]
        queries.append(Problem(f"d{i}", _perturb(rng, src.prompt, 1 + i % 8), "1"))
    got = {m.query_id: m.reference_id for m in find_near_duplicates(queries, refs)}
    assert got == _brute_force(queries, refs)
    assert 5 < len(got) < 40  # the perturbations straddle the threshold


def test_dedup_at_paper_scale() -> None:
    """3,500 training problems against 1,700 evaluation problems, as for the paper's pools (its
    time: benchmarks/bench_guards.py)."""
    rng = np.random.default_rng(1)
    evals = _random_problems(rng, 1700, "e")
    train = _random_problems(rng, 3500 - 100, "t")
    dups = [Problem(f"d{i}", _perturb(rng, evals[i].prompt, 1 + i % 3), "1") for i in range(100)]
    expected = set(_brute_force(dups, evals[:100]))  # each near copy against its own source
    pool = ProblemPool.from_problems(train + dups)
    out = pool.without_near_duplicates(evals[:1500], evals[1500:])
    assert len(expected) > 50
    assert set(out.last_report.removed_ids) == expected
    assert len(out) == 3500 - len(expected)


# ---------------------------------------------------------------------------------------------
# The prompt stream.
# ---------------------------------------------------------------------------------------------
def test_stream_is_epoch_permutations() -> None:
    pool_size, batch = 10, 4
    seq = np.concatenate([prompt_stream_batch(pool_size, 3, i, batch) for i in range(10)])
    for epoch in range(4):
        chunk = seq[epoch * pool_size:(epoch + 1) * pool_size]
        assert sorted(chunk.tolist()) == list(range(pool_size))  # each epoch covers the pool once
        expected = np.random.default_rng([3, epoch]).permutation(pool_size)
        assert chunk.tolist() == expected.tolist()


def test_stream_depends_only_on_seed_and_iteration() -> None:
    a = prompt_stream_batch(3458, seed=7, iteration=500, batch_size=24)
    b = prompt_stream_batch(3458, seed=7, iteration=500, batch_size=24)
    assert a.tolist() == b.tolist()
    assert a.tolist() != prompt_stream_batch(3458, seed=8, iteration=500, batch_size=24).tolist()
    # A resumed run asks for iteration i directly and gets what the full run got.
    full = prompt_stream_positions(3458, 7, 0, 501 * 24)
    assert full[500 * 24:].tolist() == a.tolist()


@settings(max_examples=60, deadline=None)
@given(pool_size=st.integers(1, 50), seed=st.integers(0, 2**32), start=st.integers(0, 300),
       length=st.integers(0, 120), cut=st.integers(0, 120))
def test_stream_slices_compose(pool_size: int, seed: int, start: int, length: int, cut: int) -> None:
    cut = min(cut, length)
    whole = prompt_stream_positions(pool_size, seed, start, start + length)
    left = prompt_stream_positions(pool_size, seed, start, start + cut)
    right = prompt_stream_positions(pool_size, seed, start + cut, start + length)
    assert whole.tolist() == left.tolist() + right.tolist()
    assert whole.dtype == np.int64 and (whole < pool_size).all() and (whole >= 0).all()


@pytest.mark.parametrize("args", [(0, 1, 0, 8), (5, -1, 0, 8), (5, 1, -1, 8), (5, 1, 0, 0)])
def test_stream_rejects_bad_arguments(args: tuple[int, int, int, int]) -> None:
    with pytest.raises(ValueError):
        prompt_stream_batch(*args)
