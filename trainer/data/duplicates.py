"""Near duplicates of the evaluation sets in a training pool (dense-rewards paper §C.1 "Pools and evaluation"):
exact match after normalization, or 8-gram Jaccard similarity ≥ 0.6 on word tokens. Exact, not
MinHash: an inverted index over the evaluation shingles with prefix filtering finds every pair at
or above the threshold."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


class Prompted(Protocol):
    """A problem as duplicate detection sees it (``problems.Problem``): an id and a prompt."""

    id: str
    prompt: str

_WORD = re.compile(r"\w+|[^\w\s]")


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens: runs of letters/digits/underscore, and each other non-space
    character on its own ("7+5" → 7, +, 5) so that arithmetic operators tell problems apart."""
    return _WORD.findall(text.lower())


def normalize_text(text: str) -> str:
    """The exact-match key: the word tokens joined by single spaces (case and spacing ignored)."""
    return " ".join(word_tokens(text))


def shingles(tokens: Sequence[str], n: int = 8) -> frozenset[str]:
    """The set of n-grams of ``tokens``; a text shorter than n is one shingle (itself)."""
    if len(tokens) < n:
        return frozenset([" ".join(tokens)]) if tokens else frozenset()
    return frozenset(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


@dataclass(frozen=True)
class DuplicateMatch:
    """A query problem that near-duplicates a reference problem."""

    query_id: str
    reference_id: str
    kind: Literal["exact", "jaccard"]
    similarity: float


def find_near_duplicates(
    queries: Sequence[Prompted],
    references: Sequence[Prompted],
    *,
    n: int = 8,
    threshold: float = 0.6,
) -> list[DuplicateMatch]:
    """For each query, its best near-duplicate in ``references`` (if any), exactly.

    Exact match of ``normalize_text``, else the highest Jaccard similarity of the n-gram shingle
    sets, kept when ≥ ``threshold``. Candidates come from an inverted index over the reference
    shingles probed with each query's *prefix*: its ``|A| − ceil(t·|A|) + 1`` rarest shingles.
    J(A, B) ≥ t implies |A ∩ B| ≥ t·|A|, so any such pair shares a prefix shingle; every
    candidate is then checked exactly. Cost is near-linear in the total number of shingles.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ref_keys: dict[str, int] = {}
    ref_sets: list[frozenset[str]] = []
    index: dict[str, list[int]] = defaultdict(list)
    for j, p in enumerate(references):
        toks = word_tokens(p.prompt)
        ref_keys.setdefault(" ".join(toks), j)
        s = shingles(toks, n)
        ref_sets.append(s)
        for g in s:
            index[g].append(j)

    matches: list[DuplicateMatch] = []
    for p in queries:
        toks = word_tokens(p.prompt)
        j = ref_keys.get(" ".join(toks))
        if j is not None:
            matches.append(DuplicateMatch(p.id, references[j].id, "exact", 1.0))
            continue
        a = shingles(toks, n)
        if not a:
            continue
        # Rarest first (fewest postings; absent shingles cost nothing), ties broken by text.
        ordered = sorted(a, key=lambda g: (len(index.get(g, ())), g))
        prefix = ordered[: len(a) - math.ceil(threshold * len(a) - 1e-9) + 1]
        cands: set[int] = set()
        for g in prefix:
            cands.update(index.get(g, ()))
        best_j, best = -1, 0.0
        for j in sorted(cands):
            b = ref_sets[j]
            # Size filter: J ≤ min/max, so skip pairs that cannot reach the threshold.
            if min(len(a), len(b)) < threshold * max(len(a), len(b)) - 1e-9:
                continue
            inter = len(a & b)
            sim = inter / (len(a) + len(b) - inter)
            if sim > best:
                best_j, best = j, sim
        if best_j >= 0 and best >= threshold - 1e-12:
            matches.append(DuplicateMatch(p.id, references[best_j].id, "jaccard", best))
    return matches
