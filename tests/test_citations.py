"""Citations are self-contained: code, docs and tests cite the papers by name and section, table,
figure or equation (docs/papers.md), never by files a user does not have (a reading aid, the
papers' plain-text copies) or by line numbers of such a copy.

registry/ is left out: its study files still cite line numbers (docs/registry.md). Its row ids and
sources are data, so a test that looks a row up by one of them is not citing a line."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# history may quote what an entry removed
SKIP = {"tests/test_citations.py", "CHANGELOG.md"}
FORBIDDEN = re.compile(
    r"extract(?:\.md)?\s*(?:§|S\d|L\d)"  # the reading aid's sections
    r"|extract\.md"
    r"|seeds/"  # the folder of the papers' plain-text copies
    r"|\bP2:L\d"  # a line of the multi-reward paper's copy
    r"|\bL\d{3,5}\b"  # a line of the dense-rewards paper's copy
)
QUOTED = re.compile(r'"([^"\n]*)"')


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p and not p.startswith("registry/") and p not in SKIP]


def _registry_keys() -> set[str]:
    """The registry's row ids and sources: data a test may look a row up by."""
    keys: set[str] = set()
    for f in ROOT.glob("registry/*/reported.toml"):
        data = tomllib.loads(f.read_text())
        for table in ("rows", "endpoints", "amendments"):
            for row in data.get(table, []):
                keys.update(str(row[k]) for k in ("id", "source") if k in row)
    return keys


def _hits(text: str, keys: set[str]) -> list[tuple[int, str]]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        if not FORBIDDEN.search(line):
            continue
        masked = QUOTED.sub(lambda m: '""' if m.group(1) in keys else m.group(0), line)
        if FORBIDDEN.search(masked):
            found.append((n, line.strip()))
    return found


def test_no_citation_points_outside_the_repository():
    keys = _registry_keys()
    bad = []
    for rel in _tracked():
        path = ROOT / rel
        if not path.is_file():
            continue
        raw = path.read_bytes()
        if b"\0" in raw[:8192]:
            continue  # binary (model weights, images)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        bad += [f"{rel}:{n}: {line[:120]}" for n, line in _hits(text, keys)]
    assert not bad, "cite the paper's section, table, figure or equation (docs/papers.md):\n" + "\n".join(bad)


@pytest.mark.parametrize("line, flagged", [
    ("Rule (L2458-2495): an evaluation", True),
    ("(extract §3.3, §3.4)", True),
    ("the reading aid `extract.md`", True),
    ("``seeds/000_…txt``", True),
    ("(P2:L105)", True),
    ('(dense-rewards paper §C.1 "Verifiers")', False),
    ("MATH L4–5 pool, S1–S35, 12_250_000 tokens", False),
    ('td = rows["S26", "L3115-td"]', False),  # a registry row id
    ('rows["S26", "L9999-td"]', True),  # not one
])
def test_the_check_flags_line_and_reading_aid_citations(line, flagged):
    assert bool(_hits(line, {"L3115-td"})) is flagged


def test_papers_md_names_existing_code_and_is_linked_from_the_readme():
    text = (ROOT / "docs" / "papers.md").read_text()
    assert "Are Dense Rewards Worth Their Tokens in GRPO?" in text
    assert "Multi-Reward Hacking: From Aggregation-Induced Drift to Trust-Anchored Defense" in text
    paths = {p for p in re.findall(r"`([\w./-]+)`", text) if "/" in p}
    assert paths, "docs/papers.md names no module"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
    assert "docs/papers.md" in (ROOT / "README.md").read_text()
